"""`mtk ls` keeps what it read from a run's metrics.jsonl until the file changes: an unchanged file is not parsed
again, a grown one is, and a damaged or unwritable cache only costs the speed."""

from __future__ import annotations

import json
import os

from mtk.launcher import progress_cache
from mtk.launcher.runtable import _progress


def _write(run_dir, iterations):
    recs = [{"kind": "train", "iteration": i, "lm_loss": 10.0 - i, "time": 100.0 + i, "tokens_per_s": 5.0}
            for i in range(1, iterations + 1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_unchanged_file_is_read_once_and_a_grown_one_again(tmp_path, monkeypatch):
    monkeypatch.setenv("MTK_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    run.mkdir()
    _write(run, 5)
    reads = []
    real = progress_cache.cached

    def counting(path, read):
        return real(path, lambda p: reads.append(p) or read(p))

    monkeypatch.setattr(progress_cache, "cached", counting)
    first = _progress(run)
    assert (first["iteration"], first["seconds_per_iteration"]) == (5, 1.0)
    assert _progress(run) == first and len(reads) == 1
    _write(run, 7)
    assert _progress(run)["iteration"] == 7 and len(reads) == 2
    for entry in (tmp_path / "cache" / "progress").iterdir():
        entry.write_text("{damaged")
    assert _progress(run)["iteration"] == 7 and len(reads) == 3


def test_an_unwritable_cache_still_answers(tmp_path, monkeypatch):
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache dir would be")
    monkeypatch.setenv("MTK_CACHE_DIR", str(blocked))
    run = tmp_path / "run"
    run.mkdir()
    _write(run, 3)
    assert _progress(run)["iteration"] == 3
    assert os.path.isfile(blocked)
