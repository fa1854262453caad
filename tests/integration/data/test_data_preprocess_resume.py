"""Kill preprocess mid-run, rerun: only the missing shards are done and the files equal an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mtk.data_jobs.preprocess import PreprocessConfig, preprocess
from support.faults import ShardHold

from mtk.spec.data import TokenizerSpec


@pytest.mark.integration
def test_killed_run_resumes_to_identical_files(tmp_path, small_bpe, corpus):
    spec = TokenizerSpec(type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")
    shard_mb = 0.03
    ref = preprocess(PreprocessConfig(input=str(corpus), output_prefix=str(tmp_path / "ref" / "c"), tokenizer=spec,
                                      data_dir=str(small_bpe), workers=2, shard_mb=shard_mb, progress=False),
                     log=lambda _m: None)

    prefix = tmp_path / "run" / "c"
    parts = Path(f"{prefix}.mtk-parts")
    argv = [sys.executable, "-m", "mtk.data_jobs.preprocess_cli", "--input", str(corpus), "--output-prefix",
            str(prefix), "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(small_bpe / "vocab.json"),
            "--merge-file", str(small_bpe / "merges.txt"), "--append-eod", "--workers", "1",
            "--shard-mb", str(shard_mb), "--no-progress"]
    hold = ShardHold(tmp_path / "hold", count=3)  # preprocess waits after its third shard until killed there
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, **hold.env()})
    try:
        deadline = time.monotonic() + 300  # only a hung preprocess takes this long
        while time.monotonic() < deadline and proc.poll() is None:
            if hold.held():
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"preprocess was not killed mid-run: {proc.stderr.read()!r}"
    done_before = len(list(parts.glob("*.done")))
    assert done_before == 3
    assert not Path(f"{prefix}_text_document.idx").exists(), "a killed run leaves no final .idx"
    assert not Path(f"{prefix}.mtk-preprocess.json").exists()

    logs: list[str] = []
    got = preprocess(PreprocessConfig(input=str(corpus), output_prefix=str(prefix), tokenizer=spec,
                                      data_dir=str(small_bpe), workers=1, shard_mb=shard_mb, progress=False),
                     log=logs.append)
    resumed = [m for m in logs if "resuming" in m]
    assert resumed and resumed[0].startswith(f"preprocess: resuming: {done_before}/"), logs
    for ext in ("bin", "idx"):
        assert Path(got["outputs"]["text"][ext]).read_bytes() == Path(ref["outputs"]["text"][ext]).read_bytes()
    assert got["docs"] == ref["docs"] and got["tokens"] == ref["tokens"]
