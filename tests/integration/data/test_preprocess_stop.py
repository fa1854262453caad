"""SIGTERM during ``mtk-entrypoint preprocess`` (``docker stop``, a pod's termination, ``timeout``: the signal
reaches the coordinator alone): a clean stop with one message and exit 143, no worker traceback
(``BrokenPipeError``), nothing under the output prefix, and a rerun that resumes from the finished shards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from support.faults import ShardHold


def test_sigterm_stops_preprocess_cleanly_and_the_rerun_resumes(tmp_path, corpus, small_bpe):
    prefix = tmp_path / "out" / "stdlib"
    argv = [sys.executable, "-m", "mtk.launcher.entrypoint", "preprocess", "--input", str(corpus),
            "--output-prefix", str(prefix), "--tokenizer-type", "GPT2BPETokenizer",
            "--vocab-file", str(small_bpe / "vocab.json"), "--merge-file", str(small_bpe / "merges.txt"),
            "--workers", "2", "--shard-mb", "0.1", "--no-progress"]
    parts = tmp_path / "out" / "stdlib.mtk-parts"
    hold = ShardHold(tmp_path / "hold", count=1)  # each worker waits after its first shard: the stop lands mid-run
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, **hold.env()})
    try:
        deadline = time.monotonic() + 300  # only a hung preprocess takes this long
        while not hold.held() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hold.held() and proc.poll() is None, "no worker waits after a shard; the corpus is too small"
        proc.send_signal(signal.SIGTERM)  # the coordinator alone, as docker stop / kubelet / timeout do
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert proc.returncode == 143, (proc.returncode, err)
    assert "mtk-entrypoint preprocess: error: stopped by SIGTERM" in err and "resumes" in err, err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "leaked semaphore" not in err, err
    assert not list(prefix.parent.glob("stdlib_text_document.*")), "nothing under the final prefix"
    assert not (prefix.parent / "stdlib.mtk-preprocess.json").exists()
    done = sorted(p.name.split(".")[0] for p in parts.glob("shard-*.done"))
    assert done, "the finished shards are kept"
    for shard in done:  # every shard marked done has its complete part files (temp + rename before the marker)
        assert all((parts / f"{shard}.text.{ext}").is_file() for ext in ("bin", "len", "docs")), shard

    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming: {len(done)}/" in rerun.stdout or "resuming:" in rerun.stdout, rerun.stdout
    lines = sum(1 for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip())
    assert f"({lines:,} sequences, {lines:,} docs)" in rerun.stdout, rerun.stdout
