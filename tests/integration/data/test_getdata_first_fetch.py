"""An item without sha256 is pinned on first use: the real getdata step records the digest of its first download
and refuses a later download from the same URL that differs (a moving upstream), replacing nothing; a sha256
in the spec is the way to accept the new content."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PATH = "/org/corpus/resolve/main/corpus.jsonl"


def _job(tmp_path: Path, item: dict) -> Path:
    spec = {"name": "tofu", "model": {"preset": "tiny"}, "cluster": {"device": "cpu", "procs_per_node": 1},
            "data": {"dir": str(tmp_path / "data"), "fetch": [item]}}
    from mtk.spec import validate

    path = tmp_path / "job.json"
    path.write_text(validate(spec).to_json())
    return path


def _getdata(job: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "getdata", "--job", str(job)],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))


def test_a_changed_upstream_is_refused_after_the_first_fetch(tmp_path, http_servers):
    first, second = b'{"text": "first"}\n' * 50, b'{"text": "pushed later"}\n' * 50
    files = {PATH: first}
    hub = http_servers("127.0.0.1", files)
    url = hub.base + PATH
    job = _job(tmp_path, {"url": url, "trust_first_fetch": True})
    dest, record = tmp_path / "data" / "corpus.jsonl", tmp_path / "data" / "corpus.jsonl.mtk-fetch.json"

    out = _getdata(job)
    assert out.returncode == 0, out.stderr
    assert dest.read_bytes() == first
    pinned = json.loads(record.read_text())["sha256"]
    assert pinned == hashlib.sha256(first).hexdigest()

    dest.unlink()  # the corpus is fetched again (cleaned up, or a new run reusing data.dir) after a push upstream
    files[PATH] = second
    out = _getdata(job)
    new = hashlib.sha256(second).hexdigest()
    assert out.returncode == 1, (out.stdout, out.stderr)
    error = [ln for ln in out.stderr.splitlines() if "error:" in ln]
    assert len(error) == 1 and url in error[0] and str(record) in error[0], out.stderr
    assert pinned in error[0] and f"sha256: {new}" in error[0] and "nothing was replaced" in error[0], error
    assert "Traceback" not in out.stderr
    assert not dest.exists() and json.loads(record.read_text())["sha256"] == pinned
    assert sorted(p.name for p in dest.parent.iterdir()) == [record.name]  # no part/tmp file left behind

    files[PATH] = first  # upstream reverted: the same bytes as first fetched are accepted again
    assert _getdata(job).returncode == 0 and dest.read_bytes() == first

    dest.unlink()
    files[PATH] = second  # the change is wanted: pinning the new digest in the spec accepts it
    out = _getdata(_job(tmp_path, {"url": url, "sha256": new}))
    assert out.returncode == 0, out.stderr
    assert dest.read_bytes() == second and json.loads(record.read_text())["sha256"] == new
