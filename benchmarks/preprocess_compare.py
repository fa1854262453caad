"""Tokens/s per core: mtk's preprocess vs datatrove's MegatronDocumentTokenizer vs Megatron-LM's preprocess_data.py.

    python benchmarks/preprocess_compare.py --megatron-lm /work/.mirror/NVIDIA+Megatron-LM/repo \\
        [--workdir /tmp/mtk-cmp] [--mb 40] [--workers 2] [--rounds 1]
    python benchmarks/preprocess_compare.py --slurm-scaling [--mb 250] [--tasks 4] [--cores-per-node 1]

Same corpus, same tokenizer, same cores for all three:

- corpus: generated, deterministic English-like text (Zipf-distributed pseudo-words from a fixed seed, so every
  machine gets the same bytes), one ``{"text": ...}`` per line. Written once as ``corpus.jsonl`` (for mtk and
  preprocess_data.py) and cut, in order, into ``parts/`` files (datatrove gives each task whole files; one
  file per worker by default).
- tokenizer: a 32,000-entry byte-level BPE trained on the corpus with HF ``tokenizers`` (as benchmarks/preprocess.py
  does; nothing is downloaded), used as GPT2BPETokenizer vocab.json + merges.txt by mtk and Megatron, and as the
  equivalent ``tokenizer.json`` (same BPE, ByteLevel pre-tokenizer, ``<|endoftext|>`` special) by datatrove.
  EOD/EOS is appended to every document by all three.
- cores: every run is pinned (CPU affinity) to the same ``--workers`` cores and given ``--workers`` processes
  (mtk ``--workers``, Megatron ``--workers``, datatrove ``LocalPipelineExecutor(workers=...)`` over one task per
  part file). Wall time includes imports and start-up, as a user sees it.
- Megatron-LM: ``tools/preprocess_data.py`` from the given tree (a bare git dir or a checkout; extracted to a temp
  dir), run in this venv (megatron-core is installed here; the triton-free import stub of mtk.training.compat is
  registered first, which changes nothing in tokenization).
- datatrove: installed by this script into its own venv ``benchmarks/.venvs/datatrove`` (git-ignored; pinned
  ``DATATROVE``; never a dependency of mtk), with the same ``tokenizers`` version as this venv.

After the runs the token counts of the three must agree, and so must the token bytes (mtk's .bin, Megatron's
.bin and datatrove's per-task .bin files concatenated in task order); the command fails otherwise.
Prints tokens/s, tokens/s per core, tokens per CPU-second (CPU time of the whole process tree, fairer on a loaded
machine), peak RSS of every process of every run, and the ratios mtk/datatrove and mtk/preprocess_data.py.

``--slurm-scaling``: the sharded preprocess (``--tasks N``, one Slurm array task per index) on the real test
Slurm cluster (tests/support/minicluster.py, used as a library; needs root, slurm-wlm and munge), once confined
to node1 and once to node1+node2, each node allowed ``--cores-per-node`` CPUs (Slurm ``CPUs=`` and a CPU
affinity of its own cores, so two nodes really have twice the cores). Prints both wall times, the speedup, the
per-task RSS, and checks that both merged outputs are byte-identical to a single-process run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATATROVE = "0.10.1"
DT_VENV = HERE / ".venvs" / "datatrove"
EOD = "<|endoftext|>"
MLM_REF = "core_r0.19.0"


# ---------------------------------------------------------------- corpus

_ONSETS = ("", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
           "bl", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "sc", "sh", "sl", "sm", "sn",
           "sp", "st", "str", "th", "tr", "wh", "qu")
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "oo", "ou", "y", "ie", "oa")
_CODAS = ("", "", "", "n", "r", "s", "t", "l", "m", "d", "ng", "nd", "st", "ck", "th", "rt", "ll", "nt", "ss")
_COMMON = str.split("the of and to a in is it that was for on are as with he they be at one have this from or had by "
           "not word but what some we can out other were all there when up use your how said an each she which do "
           "their time if will way about many then them write would like so these her long make thing see him "
           "two has look more day could go come did number sound no most people my over know water than call "
           "first who may down side been now find")
_EXTRA = ("café", "naïve", "déjà", "Zürich", "São", "façade", "résumé", "—", "–", "“quoted”", "€5", "±2", "…")


def _lexicon(rng: random.Random, size: int) -> list[str]:
    words, seen = list(_COMMON), set(_COMMON)
    while len(words) < size:
        w = "".join(rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
                    for _ in range(rng.choice((1, 1, 2, 2, 2, 3, 3, 4))))
        if w and w not in seen:
            seen.add(w)
            words.append(w)
    return words


def generate_corpus(out: Path, mb: float, seed: int = 1234) -> tuple[int, int]:
    """English-like documents (sentences, paragraphs, numbers, a little non-ASCII) until ``mb`` MiB of JSONL."""
    rng = random.Random(seed)
    words = _lexicon(rng, 60000)
    cum, total = [], 0.0
    for rank in range(1, len(words) + 1):
        total += 1.0 / rank ** 1.07
        cum.append(total)
    target = int(mb * (1 << 20))
    docs = size = 0
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        while size < target:
            paragraphs = []
            for _ in range(max(1, int(rng.lognormvariate(1.3, 0.8)))):
                sentences = []
                for _ in range(rng.randint(2, 9)):
                    n = rng.randint(4, 28)
                    toks = rng.choices(words, cum_weights=cum, k=n)
                    for i in range(n):
                        r = rng.random()
                        if r < 0.02:
                            toks[i] = str(rng.randint(0, 10 ** rng.randint(1, 6)))
                        elif r < 0.025:
                            toks[i] = rng.choice(_EXTRA)
                        elif r < 0.07 and i:
                            toks[i] += ","
                        elif r < 0.09:
                            toks[i] = toks[i].capitalize()
                    sentences.append(" ".join(toks).capitalize() + rng.choice("....?!;:"))
                paragraphs.append(" ".join(sentences))
            line = json.dumps({"text": "\n\n".join(paragraphs)}, ensure_ascii=False) + "\n"
            fh.write(line)
            docs += 1
            size += len(line.encode("utf-8"))
    os.replace(tmp, out)
    return docs, size


def split_corpus(corpus: Path, parts_dir: Path, parts: int) -> list[Path]:
    """Cut the corpus, in document order, into ``parts`` files of about equal size."""
    if parts_dir.exists() and len(list(parts_dir.glob("part-*.jsonl"))) == parts:
        return sorted(parts_dir.glob("part-*.jsonl"))
    shutil.rmtree(parts_dir, ignore_errors=True)
    parts_dir.mkdir(parents=True)
    per = corpus.stat().st_size / parts
    paths = [parts_dir / f"part-{i:05d}.jsonl" for i in range(parts)]
    with open(corpus, "rb") as src:
        i, written = 0, 0
        fh = open(paths[0], "wb")  # noqa: SIM115 - rotated below
        for line in src:
            if written >= per * (i + 1) and i < parts - 1:
                fh.close()
                i += 1
                fh = open(paths[i], "wb")  # noqa: SIM115
            fh.write(line)
            written += len(line)
        fh.close()
    return paths


def prepare(work: Path, mb: float) -> tuple[Path, Path, int]:
    """(corpus.jsonl, tokenizer dir, docs), built once per work dir and size."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    stamp = work / "corpus.mb"
    if not corpus.exists() or not stamp.exists() or float(stamp.read_text()) != mb:
        t0 = time.monotonic()
        docs, size = generate_corpus(corpus, mb)
        stamp.write_text(str(mb))
        shutil.rmtree(work / "parts", ignore_errors=True)
        shutil.rmtree(work / "bpe32k", ignore_errors=True)
        print(f"corpus: {docs} docs, {size / 2**20:.1f} MiB (generated in {time.monotonic() - t0:.0f} s)")
    tok_dir = work / "bpe32k"
    if not (tok_dir / "tokenizer.json").exists():
        _train_tokenizer(corpus, tok_dir)
    with open(corpus, "rb") as fh:
        docs = sum(1 for _ in fh)
    return corpus, tok_dir, docs


def _train_tokenizer(corpus: Path, tok_dir: Path) -> None:
    """vocab.json + merges.txt (GPT2BPETokenizer) and the same BPE as tokenizer.json (datatrove)."""
    from preprocess import train_bpe32k  # benchmarks/preprocess.py, beside this script
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    train_bpe32k(corpus, tok_dir, special_tokens=(EOD,))
    # The tokenizer.json is rebuilt from the saved files, so all three read the very same vocab and merges.
    same = Tokenizer(models.BPE.from_file(str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt")))
    same.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    same.decoder = decoders.ByteLevel()
    same.add_special_tokens([AddedToken(EOD, special=True, normalized=False)])
    same.save(str(tok_dir / "tokenizer.json"))


# ---------------------------------------------------------------- running and measuring


@dataclass
class Run:
    name: str
    wall: float
    cpu: float
    rss: dict[str, int] = field(default_factory=dict)  # "pid name" -> peak RSS bytes
    load: float = 0.0
    out: str = ""


def _label(proc) -> str:
    with contextlib.suppress(Exception):
        cmd = proc.cmdline()
        text = " ".join([Path(cmd[0]).name, *cmd[1:]]).replace("\n", " ")
        return text[:90]
    return "?"


def measure(name: str, argv: list[str], env: dict, cores: list[int], cwd: str | None = None) -> Run:
    """Run ``argv`` pinned to ``cores``; wall, CPU of the whole tree and peak RSS of each process (50 ms sampling).

    CPU: the larger of getrusage(RUSAGE_CHILDREN) (exact, but only for descendants that were waited for, which
    forkserver-started workers are not) and the sum over sampled processes of their last seen CPU times (misses
    at most the last 50 ms of each process).
    """
    import psutil

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, cwd=cwd,
                            preexec_fn=lambda: os.sched_setaffinity(0, cores))
    root = psutil.Process(proc.pid)
    peaks: dict[int, int] = {}
    labels: dict[int, str] = {}
    cpu_seen: dict[int, float] = {}
    import threading

    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    rss = p.memory_info().rss
                    t = p.cpu_times()
                    cpu_seen[p.pid] = t.user + t.system
                    if rss > peaks.get(p.pid, 0):
                        peaks[p.pid] = rss
                        labels.setdefault(p.pid, _label(p))
        time.sleep(0.05)
    wall = time.monotonic() - t0
    reader.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = max((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), sum(cpu_seen.values()))
    out = "".join(chunks)
    if proc.returncode:
        raise SystemExit(f"{name} failed ({proc.returncode}): {' '.join(argv)}\n{out[-4000:]}")
    rss = {f"{pid} {labels[pid]}": peaks[pid] for pid in sorted(peaks)}
    return Run(name, wall, cpu, rss, load, out)


def read_idx(path: Path) -> tuple[int, int, int]:
    """(sequences, documents, tokens) of a Megatron .idx."""
    import numpy as np

    raw = path.read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00", f"{path}: not a Megatron index"
    seqs = int.from_bytes(raw[18:26], "little")
    docs = int.from_bytes(raw[26:34], "little") - 1
    lengths = np.frombuffer(raw, dtype=np.int32, count=seqs, offset=34)
    return seqs, docs, int(lengths.sum(dtype=np.int64))


def _sha(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()[:16]


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


# ---------------------------------------------------------------- the three tools


def run_mtk(work: Path, corpus: Path, tok: Path, workers: int, cores: list[int], env: dict) -> tuple[Run, list[Path]]:
    out = _fresh(work / "out" / "mtk") / "c"
    argv = [sys.executable, "-m", "mtk.launcher.entrypoint", "preprocess", "--input", str(corpus),
            "--output-prefix", str(out), "--tokenizer-type", "GPT2BPETokenizer",
            "--vocab-file", str(tok / "vocab.json"), "--merge-file", str(tok / "merges.txt"), "--append-eod",
            "--workers", str(workers), "--no-progress"]
    run = measure("mtk", argv, env, cores)
    return run, [Path(f"{out}_text_document.bin"), Path(f"{out}_text_document.idx")]


def verify_vocabulary(tok: Path, env: dict) -> None:
    """mtk's fast engine checks a vocabulary once (cached per vocab + library versions): not part of a run."""
    t0 = time.monotonic()
    code = ("import sys; from mtk.spec.data import TokenizerSpec; "
            "from mtk.tokenizers import build_tokenizer; from mtk.data_jobs.bpe_fast import fast_gpt2; "
            f"t = build_tokenizer(TokenizerSpec(type='GPT2BPETokenizer', vocab_file={str(tok / 'vocab.json')!r}, "
            f"merge_file={str(tok / 'merges.txt')!r}), '.'); sys.exit(type(fast_gpt2(t)).__name__ != 'FastGPT2')")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
    print(f"mtk fast-engine vocabulary check (once per vocabulary, cached): {time.monotonic() - t0:.1f} s")


def megatron_tree(source: Path, into: Path) -> Path:
    """tools/preprocess_data.py from a Megatron-LM checkout or bare git dir, extracted under ``into``."""
    if (source / "tools" / "preprocess_data.py").exists():
        return source / "tools" / "preprocess_data.py"
    into.mkdir(parents=True, exist_ok=True)
    ref = MLM_REF if subprocess.run(["git", "--git-dir", str(source), "rev-parse", "--verify", "-q", MLM_REF],
                                    capture_output=True).returncode == 0 else "HEAD"
    archive = subprocess.run(["git", "--git-dir", str(source), "archive", ref, "tools/preprocess_data.py"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "tools" / "preprocess_data.py"


# Python 3.11 lacks typing.override (megatron.training imports it); triton is stubbed as mtk does on CPU.
_MEGATRON_SHIM = (
    "import runpy, sys, typing, typing_extensions\n"
    "typing.override = getattr(typing, 'override', typing_extensions.override)\n"
    "from mtk.training.compat import install_import_stubs\n"
    "install_import_stubs()\n"
    "script = sys.argv[1]; sys.argv = sys.argv[1:]\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


def offline_gpt2_hub(work: Path, tok: Path) -> Path:
    """An offline HF hub cache whose "gpt2" is our vocab/merges.

    Megatron's GPT2BPETokenizer is ``AutoTokenizer.from_pretrained("gpt2", vocab_file=..., merges_file=...)``,
    which needs the hub's "gpt2" config even with local files; with no network this cache stands in for it
    (and holds the same vocab/merges, so nothing else can be picked up)."""
    hub = work / "hf-hub"
    rev = "0" * 40
    snap = hub / "models--gpt2" / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    (hub / "models--gpt2" / "refs").mkdir(exist_ok=True)
    (hub / "models--gpt2" / "refs" / "main").write_text(rev)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(tok / name, snap / name)
    (snap / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (snap / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "model_max_length": 10**9, "bos_token": EOD, "eos_token": EOD,
        "unk_token": EOD, "add_prefix_space": False}))
    return hub


def run_megatron(work: Path, script: Path, corpus: Path, tok: Path, workers: int, cores: list[int],
                 env: dict) -> tuple[Run, list[Path]]:
    out = _fresh(work / "out" / "megatron") / "c"
    argv = [sys.executable, "-c", _MEGATRON_SHIM, str(script), "--input", str(corpus), "--output-prefix", str(out),
            "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(tok / "vocab.json"),
            "--merge-file", str(tok / "merges.txt"), "--append-eod", "--workers", str(workers),
            "--log-interval", "100000"]
    hub = offline_gpt2_hub(work, tok)
    run = measure("preprocess_data.py", argv, {**env, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub)}, cores)
    return run, [Path(f"{out}_text_document.bin"), Path(f"{out}_text_document.idx")]


_DATATROVE_PIPELINE = """\
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import MegatronDocumentTokenizer

if __name__ == "__main__":  # datatrove's workers start from a forkserver that re-imports this module
    parts, out, tokenizer, tasks, workers, logs = sys.argv[1:7]
    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(parts, text_key="text", glob_pattern="*.jsonl"),
            MegatronDocumentTokenizer(output_folder=out, save_filename="c", tokenizer_name_or_path=tokenizer,
                                      eos_token="<|endoftext|>"),
        ],
        tasks=int(tasks), workers=int(workers), logging_dir=logs, skip_completed=False,
    ).run()
"""


def datatrove_python() -> Path:
    """The benchmark's own venv with the pinned datatrove and this venv's ``tokenizers`` version."""
    import tokenizers

    py = DT_VENV / "bin" / "python"
    want = f"{DATATROVE}/{tokenizers.__version__}"
    stamp = DT_VENV / "mtk-bench.stamp"
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    pins = [f"datatrove=={DATATROVE}", f"tokenizers=={tokenizers.__version__}", "orjson"]
    print(f"installing {' '.join(pins)} into {DT_VENV}", flush=True)
    shutil.rmtree(DT_VENV, ignore_errors=True)
    if Path(uv).exists():
        subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(DT_VENV)], check=True)
        subprocess.run([uv, "pip", "install", "-q", "-p", str(py), *pins], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(DT_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *pins], check=True)
    stamp.write_text(want)
    return py


def run_datatrove(work: Path, parts: list[Path], tok: Path, workers: int, cores: list[int],
                  env: dict) -> tuple[Run, list[Path]]:
    py = datatrove_python()
    out = _fresh(work / "out" / "datatrove")
    logs = _fresh(work / "out" / "datatrove-logs")
    script = work / "datatrove_pipeline.py"
    script.write_text(_DATATROVE_PIPELINE)
    argv = [str(py), str(script), str(parts[0].parent), str(out), str(tok / "tokenizer.json"), str(len(parts)),
            str(workers), str(logs)]
    run = measure("datatrove", argv, {**env, "HF_HUB_OFFLINE": "1"}, cores)
    bins = [out / f"c_{i:05d}_tokens.bin" for i in range(len(parts))]
    return run, [*bins, *(b.with_suffix(".idx") for b in bins)]


# ---------------------------------------------------------------- reports


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def print_rss(run: Run) -> None:
    print(f"  {run.name}: peak RSS per process (task):")
    for label, rss in run.rss.items():
        print(f"    {_mib(rss):>9}  {label}")


def compare(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    corpus, tok, docs = prepare(work, args.mb)
    parts = split_corpus(corpus, work / "parts", args.parts or args.workers)
    cores = sorted(os.sched_getaffinity(0))[:args.workers]
    if len(cores) < args.workers:
        raise SystemExit(f"--workers {args.workers}: only {len(cores)} CPUs are available to this process")
    env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache"), "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    script = megatron_tree(Path(args.megatron_lm), work / "mlm") if "megatron" in args.tools else None
    # mtk's fast engine verifies a vocabulary once (cached per vocab + library versions): not part of a run.
    if "mtk" in args.tools:
        verify_vocabulary(tok, env)
    if "datatrove" in args.tools:
        datatrove_python()
    size = corpus.stat().st_size
    runners = {
        "mtk": lambda: run_mtk(work, corpus, tok, args.workers, cores, env),
        "megatron": lambda: run_megatron(work, script, corpus, tok, args.workers, cores, env),
        "datatrove": lambda: run_datatrove(work, parts, tok, args.workers, cores, env),
    }
    results: dict[str, list[Run]] = {t: [] for t in args.tools}
    files: dict[str, list[Path]] = {}
    print(f"corpus {corpus} ({docs} docs, {size / 2**20:.1f} MiB; datatrove: {len(parts)} part files), "
          f"{args.workers} worker processes pinned to CPUs {cores}")
    for r in range(args.rounds):
        for t in args.tools:
            run, files[t] = runners[t]()
            results[t].append(run)
            print(f"round {r + 1} {run.name:<19} wall {run.wall:7.1f} s  CPU {run.cpu:7.1f} s  "
                  f"(load avg at start {run.load:.1f})", flush=True)
    # Agreement: token counts and token bytes.
    counts, digests = {}, {}
    for t, paths in files.items():
        idx = [p for p in paths if p.suffix == ".idx"]
        stats = [read_idx(p) for p in idx]
        counts[t] = (sum(s[1] for s in stats), sum(s[2] for s in stats))
        digests[t] = _sha([p for p in paths if p.suffix == ".bin"])
    print("\ntoken counts (documents, tokens incl. EOD) and sha256 of the token bytes:")
    for t in args.tools:
        print(f"  {t:<10} docs {counts[t][0]:>9,}  tokens {counts[t][1]:>12,}  bin {digests[t]}")
    agree = len(set(counts.values())) == 1 and len(set(digests.values())) == 1
    print("  all agree:", "yes" if agree else "NO")
    tokens = next(iter(counts.values()))[1]
    print(f"\n{'tool':<20} {'wall s':>8} {'CPU s':>8} {'tokens/s':>11} {'tok/s/core':>11} {'tok/CPU-s':>11} "
          f"{'max task RSS':>13} {'sum RSS':>9}   (best of {args.rounds})")
    best = {t: min(results[t], key=lambda r: r.wall) for t in args.tools}
    for t in args.tools:
        b = best[t]
        per_core = tokens / b.wall / args.workers
        print(f"{b.name:<20} {b.wall:8.1f} {b.cpu:8.1f} {tokens / b.wall:11,.0f} {per_core:11,.0f} "
              f"{tokens / b.cpu:11,.0f} {_mib(max(b.rss.values())):>13} {_mib(sum(b.rss.values())):>9}")
    print()
    for t in args.tools:
        print_rss(best[t])
    if "mtk" in args.tools:
        for ref, goal in (("datatrove", 2.0), ("megatron", None)):
            if ref in args.tools:
                w, c = best[ref].wall / best["mtk"].wall, best[ref].cpu / best["mtk"].cpu
                note = f" (goal >= {goal:.1f}x per core)" if goal else ""
                print(f"mtk / {best[ref].name}: tokens/s per core {w:.2f}x, tokens per CPU-second {c:.2f}x{note}")
    print(f"load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if agree else 1


# ---------------------------------------------------------------- Slurm scaling

_ARRAY_SCRIPT = """\
#!/bin/bash
# One array task of the sharded preprocess, pinned to the CPUs its node owns.
set -euo pipefail
node=$(hostname)
case "$node" in
{cases}
  *) echo "unexpected node $node" >&2; exit 1;;
esac
echo "task $SLURM_ARRAY_TASK_ID on $node cpus $cores start $(date +%s.%N)"
taskset -c "$cores" {rss} {argv}
echo "task $SLURM_ARRAY_TASK_ID end $(date +%s.%N)"
"""


# Runs the task and reports the peak RSS of its largest process (getrusage of the waited-for children).
# Also its CPU seconds and wall: on a shared machine, CPU / wall shows whether the task really had its core.
_RSS_WRAPPER = ("import os, resource, subprocess, sys, time; t = time.monotonic(); "
                "rc = subprocess.run(sys.argv[1:]).returncode; r = resource.getrusage(resource.RUSAGE_CHILDREN); "
                "print('task', os.environ['SLURM_ARRAY_TASK_ID'], 'cpu_s', r.ru_utime + r.ru_stime, 'wall_s', "
                "time.monotonic() - t, 'maxrss_kb', r.ru_maxrss, flush=True); sys.exit(rc)")


def _array_run(cluster, work: Path, label: str, nodes: list[str], args, corpus: Path, tok: Path,
               node_cores: dict[str, str]) -> tuple[float, Path, str]:
    import shlex

    from support.minicluster import NODES

    out = _fresh(work / "out" / f"slurm-{label}") / "c"
    logs = _fresh(work / "out" / f"slurm-{label}-logs")
    argv = [sys.executable, "-m", "mtk.launcher.entrypoint", "preprocess", "--input", str(corpus),
            "--output-prefix", str(out), "--tokenizer-type", "GPT2BPETokenizer",
            "--vocab-file", str(tok / "vocab.json"), "--merge-file", str(tok / "merges.txt"), "--append-eod",
            "--workers", str(args.cores_per_node), "--tasks", str(args.tasks), "--no-progress"]
    script = logs / "task.sh"
    rss = [sys.executable, "-c", _RSS_WRAPPER]
    cases = "\n".join(f"  {n}) cores={shlex.quote(c)};;" for n, c in node_cores.items())
    script.write_text(_ARRAY_SCRIPT.format(cases=cases, rss=" ".join(shlex.quote(a) for a in rss),
                                           argv=" ".join(shlex.quote(a) for a in argv)))
    exclude = ",".join(n for n in NODES if n not in nodes)
    env = cluster.env({**os.environ, "XDG_CACHE_HOME": str(work / "cache"), "PYTHONUNBUFFERED": "1"})
    t0 = time.monotonic()
    sub = subprocess.run(["sbatch", "--parsable", f"--array=0-{args.tasks - 1}", "--ntasks=1",
                          f"--cpus-per-task={args.cores_per_node}", f"--exclude={exclude}",
                          f"--output={logs}/task-%a.out", f"--chdir={work}", str(script)],
                         env=env, capture_output=True, text=True, check=True)
    job = sub.stdout.strip().split(";")[0]
    while True:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], env=env, capture_output=True, text=True)
        if q.returncode == 0 and not q.stdout.strip():
            break
        time.sleep(0.2)
    wall = time.monotonic() - t0
    text = "".join(p.read_text() for p in sorted(logs.glob("task-*.out")))
    if not Path(f"{out}_text_document.idx").exists():
        raise SystemExit(f"slurm {label}: no merged output; task logs:\n{text[-4000:]}")
    return wall, out, text


def slurm_scaling(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(REPO / "tests"))
    from support.minicluster import MiniCluster

    work = Path(args.workdir)
    corpus, tok, docs = prepare(work, args.mb)
    cpus = sorted(os.sched_getaffinity(0))
    k = args.cores_per_node
    if 2 * k > len(cpus):
        raise SystemExit(f"--cores-per-node {k}: two nodes need {2 * k} CPUs, this machine gives {len(cpus)}")
    node_cores = {"node1": ",".join(map(str, cpus[:k])), "node2": ",".join(map(str, cpus[k:2 * k]))}
    env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache")}
    # The single-process reference (also warms the fast engine's one-time vocabulary check).
    verify_vocabulary(tok, env)
    ref, ref_files = run_mtk(work, corpus, tok, k, cpus[:k], env)
    print(f"single process, {k} worker(s), no Slurm: wall {ref.wall:.1f} s (load avg at start {ref.load:.1f})")
    ref_sha = _sha(ref_files)
    tokens = read_idx(ref_files[1])[2]
    cluster = MiniCluster(Path(tempfile.mkdtemp(prefix="mtk-bench-slurm-")), cpus_per_node=k).start()
    results: dict[str, list[float]] = {}
    shares: dict[str, list[float]] = {}
    try:
        for r in range(args.rounds):
            for label, nodes in (("1-node", ["node1"]), ("2-node", ["node1", "node2"])):
                load = os.getloadavg()[0]
                wall, out, text = _array_run(cluster, work, label, nodes, args, corpus, tok, node_cores)
                sha = _sha([Path(f"{out}_text_document.bin"), Path(f"{out}_text_document.idx")])
                if sha != ref_sha:
                    raise SystemExit(f"slurm {label}: merged output differs from the single-process output")
                stats = [line.split() for line in text.splitlines() if "maxrss_kb" in line]
                rss = [int(x[-1]) * 1024 for x in stats]
                share = sum(float(x[3]) for x in stats) / sum(float(x[5]) for x in stats)
                hosts = sorted({line.split()[3] for line in text.splitlines() if " on node" in line})
                results.setdefault(label, []).append(wall)
                shares.setdefault(label, []).append(share)
                print(f"round {r + 1} {label}: {args.tasks} array tasks on {','.join(hosts)} ({k} CPU(s) each): "
                      f"wall {wall:.1f} s, {tokens / wall:,.0f} tokens/s; peak RSS per task "
                      f"{', '.join(_mib(x) for x in rss)}; CPU / wall of the tasks {share:.0%} (100% = each had "
                      f"its cores); byte-identical to single-process: yes (load avg at start {load:.1f})", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)
    one, two = min(results["1-node"]), min(results["2-node"])
    print(f"\ncorpus {docs} docs, {corpus.stat().st_size / 2**20:.1f} MiB, {tokens:,} tokens; {args.tasks} tasks")
    print(f"scaling 1 -> 2 nodes ({k} CPU(s) per node): {one:.1f} s -> {two:.1f} s = {one / two:.2f}x (goal >= 1.8x)")
    s1, s2 = max(shares["1-node"]), max(shares["2-node"])
    if min(s1, s2) < 0.9:
        print(f"  the tasks got {s1:.0%} (1 node) and {s2:.0%} (2 nodes) of their CPUs: the machine is shared; "
              f"scaled to full CPUs (an estimate, wall x share) {one * s1:.1f} s -> {two * s2:.1f} s = "
              f"{one * s1 / (two * s2):.2f}x. Re-run on a quiet machine for the real figure.")
    print(f"load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/mtk-cmp")
    ap.add_argument("--mb", type=float, help="corpus size in MiB, generated once per size (default 40; "
                    "250 with --slurm-scaling, so the fixed costs stay small against the work)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes = pinned CPUs, for every tool")
    ap.add_argument("--parts", type=int, help="part files = datatrove tasks (default: one per worker, so each "
                    "task loads its tokenizer once: datatrove's best case)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tools", default="mtk,datatrove,megatron")
    ap.add_argument("--megatron-lm", default="/work/.mirror/NVIDIA+Megatron-LM/repo",
                    help="Megatron-LM checkout or bare git dir (tools/preprocess_data.py is read from it)")
    ap.add_argument("--slurm-scaling", action="store_true", help="1 vs 2 nodes of the test Slurm cluster")
    ap.add_argument("--tasks", type=int, default=4, help="--slurm-scaling: array tasks")
    ap.add_argument("--cores-per-node", type=int, default=1, help="--slurm-scaling: CPUs each node may use")
    args = ap.parse_args(argv)
    args.tools = args.tools.split(",")
    if args.mb is None:
        args.mb = 250.0 if args.slurm_scaling else 40.0
    args.workdir = str(Path(args.workdir) / f"{args.mb:g}mb")  # one corpus per size, kept between runs
    return slurm_scaling(args) if args.slurm_scaling else compare(args)


if __name__ == "__main__":
    sys.exit(main())
