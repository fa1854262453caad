"""Helpers for journeys on the local backend (test scaffolding): the user's CLI (``mtk launch --backend local``),
real text and the tokenizers a user trains on it (GPT-2 BPE files, a Hugging Face ``tokenizer.json``, a
SentencePiece model), SIGTERM to a running train step as a container runtime delivers it, and Megatron-LM's own
reader of a checkpoint's arguments (``mlm_read_args.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from support.faults import Hold

MLM_READ_ARGS = Path(__file__).resolve().parent / "mlm_read_args.py"
EOT = "<|endoftext|>"


def mtk(*args: str, timeout: float = 1200, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def said(out: subprocess.CompletedProcess) -> str:
    return f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"


def launch(spec: Path, *sets: str, follow: bool = True,
           env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path | None]:
    """``mtk launch SPEC --backend local`` (``env``: variables added to the run's environment); the run dir it
    printed (None when it printed none)."""
    args = ["launch", str(spec), "--backend", "local", "--follow" if follow else "--no-follow"]
    for s in sets:
        args += ["--set", s]
    out = mtk(*args, env=env)
    runs = [line.removeprefix("run: ") for line in out.stdout.splitlines() if line.startswith("run: ")]
    return out, Path(runs[-1]) if runs else None


def train_records(run_dir: Path, killed_writer: bool = False) -> dict[int, dict]:
    """iteration -> the run's train record (after a resume the re-run iteration's record wins). Every line must
    parse, except where the test killed a process that may have been writing one (``killed_writer``: a pod or
    worker killed mid-line, or a line still being appended while the test polls) — those lines are skipped."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return {}
    records = []
    for line in filter(str.strip, path.read_text().splitlines()):
        try:
            records.append(json.loads(line))
        except ValueError:
            if not killed_writer:
                raise
    return {r["iteration"]: r for r in records if r.get("kind", "train") == "train"}


def losses(run_dir: Path, killed_writer: bool = False) -> dict[int, float]:
    return {i: r["lm_loss"] for i, r in train_records(run_dir, killed_writer).items()}


def tracked(ckpt_dir: Path) -> str:
    return (ckpt_dir / "latest_checkpointed_iteration.txt").read_text().strip()


def steps_state(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "state" / "steps.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for(what: str, ready, timeout: float) -> None:
    """Poll ``ready()`` until true; the deadline only fails a hung run."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.1)


def sigterm_train_step(run_dir: Path, hold: Hold, at_iteration: int, ranks: int, timeout: float = 900) -> dict:
    """While the run's ``ranks`` ranks wait after ``at_iteration`` (``hold``, in the launch's environment), SIGTERM
    its ``mtk-entrypoint train`` process (what a container runtime or ``kill`` delivers); once a rank has caught
    it, let them go on (they save at the next iteration), wait for the run to end and return its train step's
    final state."""
    def held() -> bool:
        train = steps_state(run_dir).get("steps", {}).get("train", {})
        if train.get("state") in ("COMPLETED", "FAILED", "CANCELLED"):
            raise AssertionError(f"train step ended ({train}) before iteration {at_iteration}:\n"
                                 + _tail(run_dir / "logs" / "train.log"))
        return hold.held(at_iteration, ranks)

    wait_for(f"{run_dir.name}'s ranks to wait after iteration {at_iteration}", held, timeout)
    os.kill(int(steps_state(run_dir)["steps"]["train"]["pid"]), signal.SIGTERM)
    wait_for(f"{run_dir.name}'s ranks to catch SIGTERM", lambda: hold.signalled(at_iteration), timeout)
    hold.release(at_iteration)
    wait_for(f"{run_dir.name} to end after SIGTERM", lambda: steps_state(run_dir).get("done"), timeout)
    return steps_state(run_dir)["steps"]["train"]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not written)"


# --------------------------------------------------------------------------- the user's data and tokenizers


def stdlib_docs(n: int = 80, min_chars: int = 4000) -> list[str]:
    """Real text every machine with this Python has: its standard library's sources."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    texts = (p.read_text(encoding="utf-8", errors="replace")[:12000] for p in sorted(lib.glob("*.py")))
    return [t for t in texts if len(t) >= min_chars][:n]


def write_jsonl(path: Path, docs: list[str], keys: tuple[str, ...] = ("text",)) -> None:
    """One record per document; with several keys each gets a slice of it (a two-field corpus preprocesses
    into one prefix per key, which a blend can weigh)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for doc in docs:
            cut = len(doc) // len(keys)
            fh.write(json.dumps({k: doc[i * cut:(i + 1) * cut] for i, k in enumerate(keys)}) + "\n")


def train_gpt2_bpe(docs: list[str], out: Path, vocab: int) -> int:
    """``vocab.json`` + ``merges.txt`` (byte-level BPE, ``<|endoftext|>`` the last id); returns its vocabulary."""
    from tokenizers import ByteLevelBPETokenizer

    out.mkdir(parents=True, exist_ok=True)
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(docs, vocab_size=vocab, special_tokens=[EOT], show_progress=False)
    tok.save_model(str(out))
    return len(json.loads((out / "vocab.json").read_text()))


def train_hf_tokenizer_json(docs: list[str], out: Path, vocab: int) -> int:
    """A Llama-style ``tokenizer.json`` (byte-level BPE, ``<s>``/``</s>`` special) + ``tokenizer_config.json``
    naming ``</s>`` as EOS; returns its vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    return tok.get_vocab_size()


def train_sentencepiece(docs: list[str], out: Path, vocab: int) -> int:
    """``tokenizer.model`` (SentencePiece BPE with EOS, as Llama 2's); returns its vocabulary."""
    import sentencepiece

    out.mkdir(parents=True, exist_ok=True)
    lines = [line for doc in docs for line in doc.splitlines() if line.strip()]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(out / "tokenizer"), vocab_size=vocab, model_type="bpe",
        character_coverage=1.0, byte_fallback=True, minloglevel=2, num_threads=1)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    return int(processor.vocab_size())


# --------------------------------------------------------------------------- Megatron-LM reads the checkpoint


def megatron_lm_reads(ckpt_dir: Path, world_size: int, out: Path) -> dict:
    """What Megatron-LM's ``load_args_from_checkpoint`` reads from the tracked checkpoint under ``ckpt_dir``,
    given the arguments mtk wrote beside it (``mlm_read_args.py``); raises with its output if it fails."""
    res = subprocess.run([sys.executable, str(MLM_READ_ARGS), str(ckpt_dir), str(world_size), str(out)],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, f"mlm_read_args.py exited {res.returncode}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return json.loads(out.read_text())
