"""A Megatron-LM command line (a launch script, or the argument list alone) becomes an mtk spec.

Every flag goes through the one table (:mod:`mtk.megatron_flags`): a flag mtk models lands in its spec field, a
flag mtk sets itself or does not know is listed by name with why, and a value the script leaves unknown
(``$SLURM_JOB_NUM_NODES``) is listed instead of guessed. A flag the command leaves out gets Megatron-LM's default
where mtk's differs (``--bf16`` absent: fp32), so the spec trains what the command trains. The launcher around
``pretrain_gpt.py`` (torchrun, ``python -m torch.distributed.run``, srun, ``#SBATCH``) gives the node and process
counts and the name. Pure: text in, spec data and the list out (the verb writes them).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from mtk import megatron_flags
from mtk.megatron_flags import SET_BY_MTK, TABLE, Flag

from .shell_script import Script, Word, read

SCRIPT = re.compile(r"(^|/)pretrain_\w+\.py$")
TOKENIZERS = ("GPT2BPETokenizer", "HuggingFaceTokenizer", "GPTSentencePieceTokenizer", "NullTokenizer")
# Megatron-LM tokenizer types mtk reads with another of its own (same files, same ids)
TOKENIZER_ALIASES = {"Llama2Tokenizer": "GPTSentencePieceTokenizer", "SentencePieceTokenizer":
                     "GPTSentencePieceTokenizer"}
NPROC = ("--nproc_per_node", "--nproc-per-node")
# sbatch/srun options with a cluster.slurm field
SLURM_FIELDS = {"-p": "partition", "--partition": "partition", "-A": "account", "--account": "account", "--qos": "qos",
                "-t": "time", "--time": "time", "--exclusive": "exclusive", "--mem": "mem",
                "--container-image": "container_image", "--container-mounts": "container_mounts",
                "--container-workdir": "container_workdir", "--auto-resume": "hyperpod_auto_resume"}
NNODES = ("--nnodes",)


@dataclass
class Imported:
    """The spec data and everything about the command that is not in it."""

    spec: dict[str, Any]
    not_imported: list[tuple[str, str]] = field(default_factory=list)  # (flag or name, why)
    notes: list[str] = field(default_factory=list)  # conversions and defaults read, for the reader to check
    flags: int = 0  # Megatron-LM flags read (0: the text held no pretrain_*.py command or argument list)


def import_text(text: str, name: str | None = None, source: str = "script") -> Imported:
    """Import a launch script or argument list (``source`` names it for the spec's name when nothing else does)."""
    script = read(text)
    launcher, argv = _split(script)
    out = Imported(spec={}, flags=sum(w.text.startswith("--") for w in argv))
    _megatron(argv, out)
    _cluster(launcher, script, out)
    if out.flags:
        _unset_required(out)
    _name(script, name, source, out)
    for assumed in dict.fromkeys(a for w in [*launcher, *argv] for a in w.assumed):
        out.notes.append(assumed)
    out.notes += script.notes
    return out


def _split(script: Script) -> tuple[list[Word], list[Word]]:
    """(launcher words, pretrain_gpt.py's arguments) of the launch command; without one, the arrays/arguments
    the text holds (a megatron_lm_args.txt, or a bare argument list)."""
    for command in script.commands:
        for i, word in enumerate(command):
            if SCRIPT.search(word.text):
                return command[:i], command[i + 1:]
    for command in script.commands:
        if command[0].text.startswith("--"):
            return [], command
    return [], [w for words in script.arrays.values() if words and words[0].text.startswith("--") for w in words]


def _set(spec: dict, dotted: str, value: Any) -> None:
    node = spec
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def _get(spec: dict, dotted: str) -> Any:
    node: Any = spec
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _scalar(text: str) -> Any:
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _groups(argv: list[Word]) -> list[tuple[Word, list[Word]]]:
    """(flag, its values) in order; ``--flag=value`` split."""
    out: list[tuple[Word, list[Word]]] = []
    for word in argv:
        if word.text.startswith("--"):
            flag, eq, value = word.text.partition("=")
            out.append((Word(flag, word.unresolved, word.assumed), [Word(value, word.unresolved)] if eq else []))
        elif out:
            out[-1][1].append(word)
        else:
            out.append((word, []))
    return out


def _megatron(argv: list[Word], out: Imported) -> None:
    given: dict[str, Any] = {}
    for flag_word, values in _groups(argv):
        flag = flag_word.text
        if not flag.startswith("--"):
            out.not_imported.append((flag, "a stray argument (no flag before it)"))
            continue
        unknown = [u for w in [flag_word, *values] for u in w.unresolved]
        if unknown:
            out.not_imported.append((flag, f"its value {' '.join(w.text for w in values)!r} is not known from "
                                           f"the script ({', '.join(dict.fromkeys(unknown))})"))
            continue
        row = TABLE.get(flag) or TABLE.get(flag.replace("_", "-"))
        if row is None:
            why = SET_BY_MTK.get(flag)
            out.not_imported.append((flag, f"set by mtk itself: {why}" if why else "unknown to mtk"))
            continue
        texts = [_unquote(w.text, flag, out) for w in values]
        _apply(row, texts, given, out)
    _after(given, out)


def _unquote(text: str, flag: str, out: Imported) -> str:
    """A value that still holds its quotes (an array element "--split '99,1,0'" expanded unquoted keeps them:
    Megatron-LM would read the quotes too) is read without them, and said."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        out.notes.append(f"{flag} {text}: the quotes reach Megatron-LM as part of the value (a quoted array element "
                         f"expanded unquoted); read as {text[1:-1]}")
        return text[1:-1]
    return text


def _apply(row: Flag, values: list[str], given: dict[str, Any], out: Imported) -> None:
    flag = row.flag
    if not row.spec:
        given[flag] = values
        _by_mtk(row, values, out)
        return
    if row.form == "value" and flag != "--data-path" and len(values) != 1:
        out.not_imported.append((flag, f"expects one value, got {len(values)}"))
        return
    if row.form != "value" and values:
        out.not_imported.append((flag, f"takes no value; {' '.join(values)!r} left out"))
        values = []
    given[flag] = values[0] if len(values) == 1 else values
    if flag in SPECIAL:
        SPECIAL[flag](values, given, out)
        return
    if row.form == "value":
        _set(out.spec, row.spec, _scalar(values[0]))
    elif row.form == "true":
        _set(out.spec, row.spec, True)
    elif row.form == "false":
        _set(out.spec, row.spec, False)
    else:
        _set(out.spec, row.spec, row.when[0])


def _by_mtk(row: Flag, values: list[str], out: Imported) -> None:
    """A flag mtk sets itself: listed with what decides it, and the command's value when mtk's differs."""
    why = f"set by mtk itself: {row.why or 'always'}"
    if row.fixed is not None and row.read is None and row.form == "value":
        why += f" (mtk uses {megatron_flags.show(row.fixed)}"
        if values and str(_scalar(values[0])) != str(row.fixed):
            why += f"; the command's {values[0]} is not kept"
        why += ")"
    out.not_imported.append((row.flag, why))


def _data_path(values: list[str], given: dict, out: Imported) -> None:
    numbers = [re.fullmatch(r"[-+]?[0-9.eE+-]+", v) is not None for v in values]
    if len(values) % 2 == 0 and all(numbers[0::2]) and values:
        blend = [{"prefix": p, "weight": float(w)} for w, p in zip(values[0::2], values[1::2], strict=True)]
    else:
        blend = [{"prefix": p} for p in values]
    _set(out.spec, "data.blend", blend)


def _tokenizer_type(values: list[str], given: dict, out: Imported) -> None:
    kind = values[0]
    if kind in TOKENIZERS:
        _set(out.spec, "data.tokenizer.type", kind)
    elif kind in TOKENIZER_ALIASES:
        _set(out.spec, "data.tokenizer.type", TOKENIZER_ALIASES[kind])
        out.notes.append(f"--tokenizer-type {kind}: read as {TOKENIZER_ALIASES[kind]} (the same SentencePiece model "
                         "file and ids; mtk has no tokenizer type of that name)")
    else:
        out.not_imported.append(("--tokenizer-type", f"{kind} is unknown to mtk (it reads {', '.join(TOKENIZERS)})"))


def _eval_iters(values: list[str], given: dict, out: Imported) -> None:
    if _scalar(values[0]) == 0:
        given["no-eval"] = True
        out.notes.append("--eval-iters 0: no evaluation (train.eval_interval unset)")
    else:
        _set(out.spec, "train.eval_iters", _scalar(values[0]))


def _load(values: list[str], given: dict, out: Imported) -> None:
    if "--save" in given and given["--save"] != values[0]:
        out.not_imported.append(("--load", f"{values[0]} differs from --save {given['--save']}: mtk resumes from "
                                 "where it saves (train.init_from starts a new run from other weights)"))
    elif "--save" not in given:
        _set(out.spec, "train.checkpoint.dir", values[0])


def _save(values: list[str], given: dict, out: Imported) -> None:
    if "--load" in given and given["--load"] != values[0]:
        out.not_imported.append(("--load", f"{given['--load']} differs from --save {values[0]}: mtk resumes from "
                                 "where it saves (train.init_from starts a new run from other weights)"))
    _set(out.spec, "train.checkpoint.dir", values[0])


def _samples(spec_field: str) -> Any:
    def apply(values: list[str], given: dict, out: Imported) -> None:
        given.setdefault("samples", []).append((spec_field, int(values[0])))
    return apply


def _keep(values: list[str], given: dict, out: Imported) -> None:
    """Recorded in ``given``; :func:`_after` decides (it needs other flags)."""


SPECIAL = {"--data-path": _data_path, "--tokenizer-type": _tokenizer_type, "--eval-iters": _eval_iters,
           "--load": _load, "--save": _save, "--train-samples": _samples("train.iterations"),
           "--lr-warmup-samples": _samples("train.lr_warmup_iters"),
           "--lr-decay-samples": _samples("train.lr_decay_iters"), "--num-query-groups": _keep}


def _after(given: dict[str, Any], out: Imported) -> None:
    """What needs several flags: fp8, GQA, samples → iterations, Megatron-LM's defaults, paths under data.dir."""
    spec = out.spec
    fp8 = any(f.startswith("--fp8-") for f in given)
    if fp8:
        _set(spec, "train.precision", "fp8")
        if "--bf16" not in given:
            out.notes.append("--fp8-format without --bf16: Megatron-LM runs fp8 on bf16 weights; read as fp8")
    if "--num-query-groups" in given:
        groups = _scalar(given["--num-query-groups"])
        if "--group-query-attention" in given:
            _set(spec, "model.num_query_groups", groups)
        elif groups != _get(spec, "model.num_attention_heads"):
            out.not_imported.append(("--num-query-groups", "Megatron-LM ignores it without --group-query-attention"))
    gbs = _get(spec, "train.global_batch_size")
    for field_, samples in given.get("samples", []):
        flag = {"train.iterations": "--train-samples", "train.lr_warmup_iters": "--lr-warmup-samples"}.get(
            field_, "--lr-decay-samples")
        if not gbs:
            out.not_imported.append((flag, "needs --global-batch-size to count iterations"))
            continue
        _set(spec, field_, samples // gbs)
        out.notes.append(f"{flag} {samples}: {samples // gbs} iterations of {gbs} samples ({field_})")
    if given.get("no-eval"):
        _set(spec, "train.eval_interval", None)
    for row in megatron_flags.FLAGS:  # Megatron-LM's default where mtk's differs
        if row.absent is None or not row.spec or _absent_rows_given(row, given) or _get(spec, row.spec) is not None:
            continue
        if row.only == "num_experts" and not _get(spec, "model.moe.num_experts"):
            continue
        if row.spec.startswith("train.fp8.") and not fp8:
            continue
        if row.flag == "--initial-loss-scale" and _get(spec, "train.precision") != "fp16":
            continue
        if row.flag == "--grad-reduce-in-bf16" and _get(spec, "train.precision") not in ("bf16", "fp8"):
            continue
        if row.flag in ("--eval-interval", "--eval-iters") and given.get("no-eval"):
            continue
        if row.flag == "--no-check-for-nan-in-loss-and-grad" and _get(spec, "train.precision") == "fp16":
            continue  # Megatron-LM turns it off for fp16's dynamic loss scaling, as mtk's default does
        _set(spec, row.spec, row.absent)
    if _get(spec, "parallel.sequence_parallel") and (_get(spec, "parallel.tp") or 1) == 1:
        _set(spec, "parallel.sequence_parallel", False)  # Megatron-LM's validate_args does the same
        out.notes.append("--sequence-parallel with tensor parallel 1: Megatron-LM turns it off; so does the spec")
    model = spec.get("model", {})
    if model.get("activation") == "swiglu" and "ffn_hidden_size" not in model and "hidden_size" in model:
        ffn = int(4 * model["hidden_size"] * 2 / 3 / 64) * 64  # Megatron-LM's validate_args for --swiglu
        model["ffn_hidden_size"] = ffn
        out.notes.append(f"--ffn-hidden-size not given with --swiglu: Megatron-LM's {ffn} (2/3 of 4 × hidden, "
                         "a multiple of 64)")
    _infer_arch(spec)
    _tokenizer_folder(spec, out)
    _data_dir(spec)


def _unset_required(out: Imported) -> None:
    """Flags Megatron-LM has no default for: the global batch is micro × data parallel there; the others take
    mtk's default, said."""
    spec, train = out.spec, out.spec.setdefault("train", {})
    if "global_batch_size" not in train:
        from mtk.spec.cluster import ClusterSpec

        cluster, parallel = spec.get("cluster", {}), spec.get("parallel", {})
        fields = ClusterSpec.model_fields  # a count the command does not give is mtk's default, as in the spec
        world = cluster.get("nodes", fields["nodes"].default) * \
            cluster.get("procs_per_node", fields["procs_per_node"].default)
        split = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel.get("cp", 1)
        if world % split == 0:
            train["global_batch_size"] = train.get("micro_batch_size", 1) * (world // split)
            out.notes.append(f"no --global-batch-size: Megatron-LM's micro batch × data parallel "
                             f"({train['global_batch_size']})")
    for field_, flag in (("iterations", "--train-iters"), ("lr", "--lr"), ("micro_batch_size", "--micro-batch-size")):
        if field_ not in train:
            out.notes.append(f"no {flag}: Megatron-LM has no default; mtk's train.{field_} default is used")


def _absent_rows_given(row: Flag, given: dict) -> bool:
    """Whether the command gave this row's field by any of its flags (--bf16/--fp16 both say the precision)."""
    return any(f in given for f in (r.flag for r in megatron_flags.FLAGS if r.spec == row.spec))


def _infer_arch(spec: dict) -> None:
    model = spec.get("model", {})
    if (model.get("position_embedding"), model.get("activation"), model.get("normalization")) == \
            ("rope", "swiglu", "RMSNorm"):
        model["arch"] = "llama"


def _tokenizer_folder(spec: dict, out: Imported) -> None:
    tok = _get(spec, "data.tokenizer") or {}
    if "type" not in tok and tok.get("vocab_file") and tok.get("merge_file"):
        tok["type"] = "GPT2BPETokenizer"
        out.notes.append("--vocab-file and --merge-file without --tokenizer-type: read as GPT2BPETokenizer, the type "
                         "those two files are for")
    if tok.get("type") == "HuggingFaceTokenizer" and tok.get("model") and not tok["model"].endswith(".json"):
        tok["model"] = f"{tok['model'].rstrip('/')}/tokenizer.json"
        out.notes.append(f"--tokenizer-model: the folder's tokenizer.json ({tok['model']})")


def _data_dir(spec: dict) -> None:
    """data.dir: the folder the data files share, so the spec names them as mtk does (relative to it); the index
    cache under it stays the default."""
    data = spec.get("data", {})
    tok = data.get("tokenizer", {})
    paths = [b["prefix"] for b in data.get("blend", [])] + [tok[k] for k in ("vocab_file", "merge_file", "model")
                                                           if tok.get(k)]
    cache = data.get("cache_dir")
    dirs = [os.path.dirname(p) for p in paths] + ([os.path.dirname(cache.rstrip("/"))] if cache else [])
    dirs = [d for d in dirs if d and "://" not in d]
    if not dirs or len({d.startswith("/") for d in dirs}) != 1:
        return
    root = os.path.commonpath(dirs)
    if not root or root == "/":
        return
    data["dir"] = root
    for item in data.get("blend", []):
        item["prefix"] = os.path.relpath(item["prefix"], root)
    for key in ("vocab_file", "merge_file", "model"):
        if tok.get(key) and tok[key].startswith(root + "/"):
            tok[key] = os.path.relpath(tok[key], root)
    if cache and os.path.normpath(cache) == os.path.join(root, "index-cache"):
        del data["cache_dir"]


def _cluster(launcher: list[Word], script: Script, out: Imported) -> None:
    """Nodes and processes per node from torchrun's options, else srun's/#SBATCH's; other launcher options listed."""
    cluster: dict[str, Any] = {"device": "gpu"}
    words = [w for w in launcher]
    options = _options(words)
    for opt, value in _sbatch_options(script.sbatch):
        options.setdefault(("#SBATCH", opt), value)
    nodes = procs = None
    slurm: dict[str, Any] = {}
    for (where, opt), value in options.items():
        target = None
        field_ = SLURM_FIELDS.get(opt) if where in ("srun", "#SBATCH") else None
        if field_ and (value is None or not value.unresolved):
            if field_ == "exclusive":
                slurm["exclusive"] = True
            elif field_ == "hyperpod_auto_resume":  # HyperPod's srun --auto-resume=1
                slurm[field_] = value is not None and value.text == "1"
            elif field_ == "container_mounts" and value is not None:
                slurm["container_mounts"] = value.text.split(",")
            elif value is not None:
                slurm[field_] = value.text
            continue
        if opt in NPROC:
            target = "procs_per_node"
        elif opt in NNODES or (where in ("srun", "#SBATCH") and opt in ("-N", "--nodes")):
            target = "nodes"
        elif where in ("srun", "#SBATCH") and opt in ("--ntasks-per-node", "--gpus-per-node"):
            target = "procs_per_node"
        if target is None or value is None:
            if opt not in ("-J", "--job-name"):
                out.not_imported.append((f"{where} {opt}", "a launcher option: mtk renders its own launcher "
                                         "(cluster.*, cluster.slurm.*)"))
            continue
        if value.unresolved:
            out.not_imported.append((f"{where} {opt}", f"{value.text!r} is not known from the script"))
            continue
        if not re.fullmatch(r"\d+", value.text):
            out.not_imported.append((f"{where} {opt}", f"{value.text!r} is not a count mtk reads"))
            continue
        if target == "nodes" and nodes is None:
            nodes = int(value.text)
        elif target == "procs_per_node" and procs is None:
            procs = int(value.text)
    if nodes is not None:
        cluster["nodes"] = nodes
    if procs is not None:
        cluster["procs_per_node"] = procs
    if slurm or script.sbatch or any(w.text == "srun" for w in launcher):
        slurm.setdefault("runtime", "pyxis" if any(o == "--container-image" for _, o in options) else "bare")
        cluster["slurm"] = slurm
    if script.exports:
        out.notes.append("environment exported by the script, not imported (mtk sets its own; cluster.env adds "
                         f"more): {', '.join(script.exports)}")
    out.spec["cluster"] = cluster


def _options(words: list[Word]) -> dict[tuple[str, str], Word | None]:
    """Launcher options by (launcher, option): srun's before the program, torchrun's after torchrun."""
    out: dict[tuple[str, str], Word | None] = {}
    where = ""
    i = 0
    while i < len(words):
        text = words[i].text
        if text in ("srun", "torchrun", "mpirun"):
            where = text
        elif text in ("python", "python3") or text.endswith(("/python", "/python3")):
            where = "python"
        elif where == "python":  # python's own options; -m torch.distributed.run is torchrun
            if text == "-m" and i + 1 < len(words):
                i += 1
                if words[i].text in ("torch.distributed.run", "torch.distributed.launch"):
                    where = "torchrun"
        elif text.startswith("-") and where:
            opt, eq, value = text.partition("=")
            if eq:
                out[(where, opt)] = Word(value, words[i].unresolved, words[i].assumed)
            elif i + 1 < len(words) and not words[i + 1].text.startswith("-") and words[i + 1].text not in (
                    "python", "python3", "torchrun"):
                out[(where, opt)] = words[i + 1]
                i += 1
            else:
                out[(where, opt)] = None
        i += 1
    return out


def _sbatch_options(lines: list[str]) -> list[tuple[str, Word | None]]:
    import shlex

    out: list[tuple[str, Word | None]] = []
    for line in lines:
        try:
            parts = shlex.split(line, comments=True)
        except ValueError:
            continue
        for part in parts:
            opt, eq, value = part.partition("=")
            out.append((opt, Word(value) if eq else None))
    return out


def _name(script: Script, name: str | None, source: str, out: Imported) -> None:
    if name is None:
        for opt, value in _sbatch_options(script.sbatch):
            if opt in ("-J", "--job-name") and value is not None:
                name = value.text
        name = name or os.path.splitext(os.path.basename(source))[0]
    clean = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-") or "imported"
    out.spec = {"name": clean, **out.spec}
