"""Issue 28's regression, local half: a run whose tokenizer's vocabulary differs from `model.vocab_size` must
resume its own checkpoint. Train 10 iterations on a real corpus tokenized with its own byte-level BPE (500 tokens,
padded to 512 at tp=2, while the tiny preset says 1024), relaunch the same spec with `train.iterations=20`:
the relaunch resumes at 11 with the losses of an uninterrupted 20-iteration run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SPEC = """\
name: {name}
cluster:
  nodes: 1
  procs_per_node: 2
  device: cpu
  runs_dir: {runs}
  env:
    OMP_NUM_THREADS: "1"
model:
  preset: tiny
parallel:
  tp: 2
train:
  micro_batch_size: 2
  global_batch_size: 8
  iterations: 10
  lr: 1.0e-3
  min_lr: 1.0e-4
  lr_warmup_iters: 2
  lr_decay_iters: 20
  precision: fp32
  log_interval: 1
  checkpoint:
    save_interval: 10
data:
  dir: {data}
  corpus:
    input: corpus.jsonl
    output_prefix: tok/corpus
    json_keys: [text]
    append_eod: true
    workers: 1
  tokenizer:
    type: GPT2BPETokenizer
    vocab_file: vocab.json
    merge_file: merges.txt
  split: "98,1,1"
  num_workers: 0
"""


def mtk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=900)


def write_corpus_and_vocab(data: Path, vocab_size: int) -> None:
    """A JSONL corpus from docstrings already on the machine and a byte-level BPE trained on it."""
    from tokenizers import ByteLevelBPETokenizer

    docs: list[str] = []
    for name in ("json", "pathlib", "subprocess", "argparse", "collections", "logging", "shutil", "textwrap"):
        module = __import__(name)
        for obj in [module, *vars(module).values()]:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and len(doc) > 80 and doc not in docs:
                docs.append(doc)
    data.mkdir(parents=True, exist_ok=True)
    with open(data / "corpus.jsonl", "w") as fh:
        for i in range(3):
            for doc in docs:
                fh.write(json.dumps({"text": f"{i} {doc}"}) + "\n")
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(docs, vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False)
    tok.save_model(str(data))
    assert len(json.loads((data / "vocab.json").read_text())) == vocab_size


def launch(spec: Path, *sets: str) -> tuple[subprocess.CompletedProcess, Path | None]:
    args = ["launch", str(spec), "--backend", "local", "--follow"]
    for s in sets:
        args += ["--set", s]
    out = mtk(*args)
    runs = [line.removeprefix("run: ") for line in out.stdout.splitlines() if line.startswith("run: ")]
    return out, Path(runs[-1]) if runs else None


def losses(run_dir: Path) -> dict[int, float]:
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["iteration"]: r["lm_loss"] for r in records if r.get("kind", "train") == "train"}


def test_relaunch_with_more_iterations_resumes_when_tokenizer_vocab_differs_from_spec(tmp_path):
    data = tmp_path / "data"
    write_corpus_and_vocab(data, vocab_size=500)

    def spec(name: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(SPEC.format(name=name, runs=tmp_path / "runs", data=data))
        return path

    straight_out, straight = launch(spec("straight"), "train.iterations=20")
    assert straight_out.returncode == 0 and straight, straight_out.stdout[-3000:] + straight_out.stderr[-3000:]
    reference = losses(straight)
    assert sorted(reference) == list(range(1, 21))

    first_out, first = launch(spec("resumed"))
    assert first_out.returncode == 0 and first, first_out.stdout[-3000:] + first_out.stderr[-3000:]
    ckpt = tmp_path / "runs" / "resumed" / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "10"

    second_out, second = launch(spec("resumed"), "train.iterations=20")
    assert second_out.returncode == 0 and second, (
        f"relaunch refused (exit {second_out.returncode}):\n{second_out.stdout[-3000:]}\n{second_out.stderr[-3000:]}")
    resumed = losses(second)
    assert sorted(resumed) == list(range(11, 21)), sorted(resumed)
    for it in range(11, 21):
        assert math.isclose(resumed[it], reference[it], rel_tol=1e-6, abs_tol=1e-7), (it, resumed[it], reference[it])
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "20"
