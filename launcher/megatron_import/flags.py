"""pretrain_gpt.py's arguments into spec fields, through the one table (:mod:`mtk.megatron_flags`) and the classes
of :mod:`.flag_classes`: a flag mtk models lands in its field; one that does not change what trains is listed as
ignored; one that does and that mtk cannot honour — unknown to it, its value unknown, a value mtk cannot take — is
refused by name. A flag the command leaves out gets Megatron-LM's default where mtk's differs."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from typing import Any

from mtk import megatron_flags
from mtk.megatron_flags import Flag
from mtk.megatron_flags.row import data_get

from ..bash_reader import Value
from ..bash_reader.values import Chunk
from . import batch_flags
from .flag_classes import PATHS, SAME_MATH, classify

TOKENIZERS = ("GPT2BPETokenizer", "HuggingFaceTokenizer", "GPTSentencePieceTokenizer", "NullTokenizer")
# Megatron-LM tokenizer types mtk reads with another of its own (same files, same ids)
TOKENIZER_ALIASES = {"Llama2Tokenizer": "GPTSentencePieceTokenizer", "SentencePieceTokenizer":
                     "GPTSentencePieceTokenizer"}


@dataclass
class Imported:
    """The spec data and every flag's fate: honoured (in the spec), ignored (does not change what trains) or
    refused (changes what trains and mtk cannot honour it), each with why; ``notes`` are readings to check."""

    spec: dict[str, Any]
    honoured: list[str] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entry: str = ""  # the entry point as written; "" for an argument list
    line: int = 0  # the training command's line
    flags: int = 0  # Megatron-LM flags read
    given: dict[str, list[str]] = field(default_factory=dict)  # each flag's values as given
    derived: list[Flag] = field(default_factory=list)  # rows mtk derives: checked against the validated job

    @property
    def not_imported(self) -> list[tuple[str, str]]:
        return [*self.refused, *self.ignored]


@dataclass(frozen=True)
class Group:
    flag: Value
    values: tuple[Value, ...]

    @property
    def texts(self) -> list[str]:
        return [v.text for v in self.values]


def set_field(spec: dict, dotted: str, value: Any) -> None:
    node = spec
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


get_field = data_get  # the spec data's field at a dotted path; None when left out


def scalar(text: str) -> Any:
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


# flags Megatron-LM reads with type=int whose spec field takes any number (a rope base of 1e6 is a valid spec)
WHOLE_IN_MEGATRON = frozenset({"--rotary-base"})


def whole_number(row: Flag) -> bool:
    """Whether Megatron-LM reads the row's flag with argparse's ``type=int``: its spec field takes a whole number,
    or it is one of :data:`WHOLE_IN_MEGATRON` (a test holds this against Megatron-LM's parser, flag by flag)."""
    return row.form == "value" and bool(row.spec) and (row.flag in WHOLE_IN_MEGATRON or _int_field(row.spec))


@functools.cache
def _int_field(dotted: str) -> bool:
    """Whether the spec field at ``dotted`` takes a whole number (``int``, or ``int | None``)."""
    from pydantic import BaseModel

    from mtk.spec.job import Job

    model: type[BaseModel] = Job
    *parents, last = dotted.split(".")
    for part in parents:
        annotation = model.model_fields[part].annotation
        model = next(a for a in (annotation, *getattr(annotation, "__args__", ()))
                     if isinstance(a, type) and issubclass(a, BaseModel))
    field = model.model_fields.get(last)
    if field is None:  # a row whose field the spec does not have yet
        return False
    annotation = field.annotation
    kinds = {a for a in (annotation, *getattr(annotation, "__args__", ())) if a is not type(None)}
    return int in kinds and not kinds & {float, str}


def _int_as_argparse(text: str) -> bool:
    """What argparse's ``type=int`` takes: Python's ``int()`` of the text ('1e3' and '1.0' are refused)."""
    try:
        int(text)
    except ValueError:
        return False
    return True


def groups(argv: list[Value] | tuple[Value, ...]) -> list[Group]:
    """(flag, its values) in order; ``--flag=value`` split; words before the first flag (or a flag whose own name
    is not known) under an empty flag."""
    out: list[tuple[Value, list[Value]]] = []
    for word in argv:
        head = word.chunks[0] if word.chunks else None
        if head is not None and not head.why and head.text.startswith("--"):
            name, eq, rest = head.text.partition("=")
            if eq or len(word.chunks) == 1:
                tail = ((Chunk(rest),) if rest else ()) + word.chunks[1:]
                out.append((Value((Chunk(name),), word.assumed, word.line),
                            [Value(tail, word.assumed, word.line, word.splits)] if eq else []))
                continue
            out.append((Value((), (), word.line), [word]))
        elif out:
            out[-1][1].append(word)
        else:
            out.append((Value((), (), word.line), [word]))
    return [Group(f, tuple(v)) for f, v in out]


def where(value: Value) -> str:
    return f" (line {value.line})" if value.line else ""


def read_flags(found: list[Group], out: Imported) -> None:
    given: dict[str, Any] = {}
    for group in found:
        flag = group.flag.text
        out.flags += bool(flag)
        if not flag:
            words = " ".join(v.text for v in group.values)
            reasons = "; ".join(dict.fromkeys(u for v in group.values for u in v.unknown))
            why = f"not known, so it may hold any flags: {reasons}" if reasons else \
                "an argument with no flag before it (Megatron-LM would stop at it)"
            out.refused.append((words, f"{why}{where(group.values[0])}"))
            continue
        cls = classify(flag)
        unknown = [u for v in group.values for u in v.unknown]
        if cls.row is None:
            target = out.ignored if cls.kind == "ignored" else out.refused
            target.append((flag, cls.why + (f"; its value {' '.join(group.texts)!r} is not known either"
                                            if unknown and cls.kind == "changes" else "") + where(group.flag)))
            continue
        row = cls.row
        out.given[flag] = group.texts
        if unknown:
            reason = f"its value {' '.join(group.texts)!r} is not known: {'; '.join(dict.fromkeys(unknown))}"
            if flag in PATHS:
                out.ignored.append((flag, f"{reason}; the spec keeps mtk's default ({row.why or 'its own path'})"))
            else:
                out.refused.append((flag, reason))
            continue
        texts = [_unquote(v.text, flag, out) for v in group.values]
        if not row.spec:
            _by_mtk(row, texts, group, out)
            given[flag] = texts
            continue
        _apply(row, texts, group, given, out)
    _after(given, out)


def _unquote(text: str, flag: str, out: Imported) -> str:
    """A value that still holds its quotes (an array element "--split '99,1,0'" expanded unquoted keeps them:
    Megatron-LM would read the quotes too) is read without them, and said."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        out.notes.append(f"{flag} {text}: the quotes reach Megatron-LM as part of the value (a quoted array element "
                         f"expanded unquoted); read as {text[1:-1]}")
        return text[1:-1]
    return text


def _apply(row: Flag, values: list[str], group: Group, given: dict[str, Any], out: Imported) -> None:
    flag = row.flag
    if row.form == "value" and flag not in ("--data-path", batch_flags.RAMPUP) and len(values) != 1:
        out.refused.append((flag, f"expects one value, got {len(values)} ({' '.join(values)!r}){where(group.flag)}"))
        return
    if row.form != "value" and values:
        extra = "not known: it may hold other flags" if any(not v.known or v.splits for v in group.values) else \
            "Megatron-LM would stop at it"
        out.refused.append((f"{flag} {' '.join(values)}", f"{flag} takes no value; what follows it is {extra}"
                                                          f"{where(group.flag)}"))
        return
    whole = whole_number(row)
    if whole and not _int_as_argparse(values[0]):
        out.refused.append((flag, f"{values[0]!r} is not a whole number: Megatron-LM reads {flag} with int() and "
                                  f"stops at it{where(group.flag)}"))
        return
    given[flag] = values[0] if len(values) == 1 else values
    out.honoured.append(flag)
    if flag in SPECIAL:
        SPECIAL[flag](values, given, out)
    elif row.form == "value":
        set_field(out.spec, row.spec, int(values[0]) if whole else scalar(values[0]))
    elif row.form in ("true", "false"):
        set_field(out.spec, row.spec, row.form == "true")
    else:
        set_field(out.spec, row.spec, row.when[0])


# rows mtk derives from a spec field that the script's value gives back exactly: the field it comes from
DERIVED_FROM_VALUE = {"--distributed-timeout-minutes": lambda minutes: minutes * 60}  # cluster.pg_timeout_s


def _by_mtk(row: Flag, values: list[str], group: Group, out: Imported) -> None:
    """A table row mtk sets itself: the same value is ignored; another one is refused unless it computes the same
    model (:data:`~.flag_classes.SAME_MATH`); a derived one is checked once the spec validates."""
    flag = row.flag
    why = f"set by mtk itself: {row.why or 'always'}"
    inverse = DERIVED_FROM_VALUE.get(flag)
    if inverse is not None and len(values) == 1 and _int_as_argparse(values[0]):
        set_field(out.spec, row.derived_from, inverse(int(values[0])))
        out.honoured.append(flag)
        out.derived.append(row)  # the spec's own value checked again once it validates
        return
    if row.read is not None:
        out.derived.append(row)
        out.ignored.append((flag, why))
        return
    if row.fixed is None:
        out.ignored.append((flag, why))
        return
    mine = megatron_flags.show(row.fixed)
    theirs = " ".join(values) if row.form == "value" else ("true" if row.form == "true" else "false")
    if (row.form == "value" and str(scalar(theirs)) == str(scalar(mine))) or theirs == mine:
        out.ignored.append((flag, f"{why} (the same {mine})"))
    elif flag in SAME_MATH:
        out.ignored.append((flag, f"mtk uses {mine}; the script's {theirs} is {SAME_MATH[flag]}"))
    else:
        out.refused.append((flag, f"mtk always uses {mine}; the script's {theirs} trains differently"
                                  f"{where(group.flag)}"))


def agreement(imported: Imported, job: Any) -> list[tuple[str, str]]:
    """Rows mtk derives (``--kv-channels``: hidden ÷ heads) whose value in the script differs from the spec's:
    each changes what trains, so each is refused."""
    out = []
    for row in imported.derived:
        theirs = imported.given.get(row.flag, [])
        mine = row.value(job)
        if row.form == "value":
            same = len(theirs) == 1 and str(scalar(theirs[0])) == str(scalar(str(mine)))
        else:
            same = bool(mine) == (row.form != "false")
        if not same:
            shown = " ".join(theirs) if theirs else "the flag"
            out.append((row.flag, f"the script's {shown} differs from what the spec trains "
                                  f"({megatron_flags.show(mine)}: {row.why})"))
    return out


def _data_path(values: list[str], given: dict, out: Imported) -> None:
    numbers = [re.fullmatch(r"[-+]?[0-9.eE+-]+", v) is not None for v in values]
    if len(values) % 2 == 0 and all(numbers[0::2]) and values:
        blend = [{"prefix": p, "weight": float(w)} for w, p in zip(values[0::2], values[1::2], strict=True)]
    else:
        blend = [{"prefix": p} for p in values]
    set_field(out.spec, "data.blend", blend)


def _tokenizer_type(values: list[str], given: dict, out: Imported) -> None:
    kind = values[0]
    if kind in TOKENIZERS:
        set_field(out.spec, "data.tokenizer.type", kind)
    elif kind in TOKENIZER_ALIASES:
        set_field(out.spec, "data.tokenizer.type", TOKENIZER_ALIASES[kind])
        out.notes.append(f"--tokenizer-type {kind}: read as {TOKENIZER_ALIASES[kind]} (the same SentencePiece model "
                         "file and ids; mtk has no tokenizer type of that name)")
    else:
        out.honoured.remove("--tokenizer-type")
        out.refused.append(("--tokenizer-type", f"{kind} is unknown to mtk (it reads {', '.join(TOKENIZERS)})"))


def _eval_iters(values: list[str], given: dict, out: Imported) -> None:
    if scalar(values[0]) == 0:
        given["no-eval"] = True
        out.notes.append("--eval-iters 0: no evaluation (train.eval_interval unset)")
    else:
        set_field(out.spec, "train.eval_iters", scalar(values[0]))


def _load(values: list[str], given: dict, out: Imported) -> None:
    if "--save" in given and given["--save"] != values[0]:
        _other_weights(values[0], given["--save"], out)
    elif "--save" not in given:
        set_field(out.spec, "train.checkpoint.dir", values[0])


def _save(values: list[str], given: dict, out: Imported) -> None:
    if "--load" in given and given["--load"] != values[0]:
        _other_weights(given["--load"], values[0], out)
    set_field(out.spec, "train.checkpoint.dir", values[0])


def _other_weights(load: str, save: str, out: Imported) -> None:
    out.honoured.remove("--load")
    out.refused.append(("--load", f"{load} differs from --save {save}: the run starts from other weights; mtk "
                                  "resumes from where it saves (train.init_from starts a run from other weights)"))


def _samples(spec_field: str) -> Any:
    def apply(values: list[str], given: dict, out: Imported) -> None:  # a whole number: _apply checked
        given.setdefault("samples", []).append((spec_field, int(values[0])))
    return apply


SAMPLE_FLAGS = {"--train-samples": "train.iterations", "--lr-warmup-samples": "train.lr_warmup_iters",
                "--lr-decay-samples": "train.lr_decay_iters"}


def _keep(values: list[str], given: dict, out: Imported) -> None:
    """Recorded in ``given``; :func:`_after` decides (it needs other flags)."""


SPECIAL = {"--data-path": _data_path, "--tokenizer-type": _tokenizer_type, "--eval-iters": _eval_iters,
           "--load": _load, "--save": _save, "--train-samples": _samples("train.iterations"),
           "--lr-warmup-samples": _samples("train.lr_warmup_iters"),
           "--lr-decay-samples": _samples("train.lr_decay_iters"), "--num-query-groups": _keep,
           batch_flags.RAMPUP: batch_flags.read_rampup}


def _after(given: dict[str, Any], out: Imported) -> None:
    """What needs several flags: fp8, GQA, samples → iterations, Megatron-LM's defaults, paths under data.dir."""
    spec = out.spec
    fp8 = any(f.startswith("--fp8-") for f in given if f in out.honoured)
    if fp8:
        set_field(spec, "train.precision", "fp8")
        if "--bf16" not in given:
            out.notes.append("--fp8-format without --bf16: Megatron-LM runs fp8 on bf16 weights; read as fp8")
    if "--num-query-groups" in given:
        groups_ = scalar(given["--num-query-groups"])
        if "--group-query-attention" in given:
            set_field(spec, "model.num_query_groups", groups_)
        elif groups_ != get_field(spec, "model.num_attention_heads"):
            out.honoured.remove("--num-query-groups")
            out.ignored.append(("--num-query-groups", "Megatron-LM ignores it without --group-query-attention"))
    if batch_flags.STEP in given and "--global-batch-size" in given:
        out.honoured.remove("--global-batch-size")
        out.refused.append(("--global-batch-size", f"given with {batch_flags.STEP}: Megatron-LM stops at the two "
                                                   "together (the schedule's last step is the global batch)"))
        del spec["train"]["global_batch_size"]
    batch_flags.apply_rampup(given, out, get_field)
    batch_flags.refuse_iterations(given, out, spec, get_field)
    schedule = batch_flags.schedule_of(spec, get_field)
    gbs = get_field(spec, "train.global_batch_size")
    for field_, samples in given.get("samples", []):
        flag = next(f for f, s in SAMPLE_FLAGS.items() if s == field_)
        iters = flag.replace("-samples", "-iters")
        other = given.get(iters)  # Megatron-LM's validate_args: one unit or the other (a warmup of 0 iterations aside)
        if other is not None and (flag != "--lr-warmup-samples" or other != "0"):
            out.refused.append((flag, f"given with {iters}: Megatron-LM counts in iterations or in samples, and stops "
                                      "at both"))
            continue
        if schedule is not None:
            set_field(spec, field_, batch_flags.iterations_of(flag, samples, schedule, given, out))
            continue
        if not gbs:
            out.refused.append((flag, "needs --global-batch-size to count iterations"))
            continue
        if samples % gbs:
            out.notes.append(f"{flag} {samples} is not a whole number of global batches of {gbs}: Megatron-LM "
                             f"counts {samples / gbs:.2f}; read as {samples // gbs}")
        set_field(spec, field_, samples // gbs)
        out.notes.append(f"{flag} {samples}: {samples // gbs} iterations of {gbs} samples ({field_})")
    if given.get("no-eval"):
        set_field(spec, "train.eval_interval", None)
    if "--fp16" in given and "--bf16" in given:
        out.refused.append(("--fp16", "given with --bf16: Megatron-LM stops at the two together"))
    if "--mock-data" in given and get_field(spec, "data.blend"):  # Megatron-LM then trains on mock data
        del spec["data"]["blend"]
        out.honoured.remove("--data-path")
        out.refused.append(("--data-path", "given with --mock-data, under which Megatron-LM trains on mock data and "
                                           "never reads it; keep one of the two"))
    _megatron_defaults(given, out)
    if get_field(spec, "parallel.sequence_parallel") and (get_field(spec, "parallel.tp") or 1) == 1:
        set_field(spec, "parallel.sequence_parallel", False)  # Megatron-LM's validate_args does the same
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


def _megatron_defaults(given: dict[str, Any], out: Imported) -> None:
    """A field the command leaves out gets Megatron-LM's value where mtk's default differs: the table's
    ``absent`` values, where their rows apply to the spec as imported (:func:`mtk.megatron_flags.absent_values`)."""
    for dotted, value in megatron_flags.absent_values(out.spec, given).items():
        set_field(out.spec, dotted, value)


def required(out: Imported, world: int | None) -> None:
    """What Megatron-LM has no default for: refused when absent (Megatron-LM would stop); the global batch is
    micro × data parallel there, known only with the world size."""
    spec, train = out.spec, out.spec.setdefault("train", {})
    given = {flag for flag, _ in [*out.refused, *out.ignored]} | set(out.given)  # given, if not honoured
    if "micro_batch_size" not in train and "--micro-batch-size" not in given:
        out.refused.append(("--micro-batch-size", "not given: Megatron-LM requires it"))
    if "global_batch_size" not in train and "--global-batch-size" not in given and "batch_size_schedule" not in train:
        parallel = spec.get("parallel", {})
        split = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel.get("cp", 1)
        if world is None or world % split:
            out.refused.append(("--global-batch-size", "not given: Megatron-LM uses micro batch × data parallel, "
                                                       "and the script does not say how many processes run it"))
        else:
            train["global_batch_size"] = train.get("micro_batch_size", 1) * (world // split)
            out.notes.append(f"no --global-batch-size: Megatron-LM's micro batch × data parallel "
                             f"({train['global_batch_size']})")
    if "iterations" not in train and not given & {"--train-iters", "--train-samples"}:
        out.refused.append(("--train-iters", "not given (nor --train-samples): Megatron-LM needs one to train"))
    if "lr" not in train and "--lr" not in given:
        out.refused.append(("--lr", "not given: Megatron-LM has no default learning rate"))


def _infer_arch(spec: dict) -> None:
    model = spec.get("model", {})
    if (model.get("position_embedding"), model.get("activation"), model.get("normalization")) == \
            ("rope", "swiglu", "RMSNorm"):
        model["arch"] = "llama"


def _tokenizer_folder(spec: dict, out: Imported) -> None:
    tok = get_field(spec, "data.tokenizer") or {}
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
