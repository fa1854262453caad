"""A secret by reference on the real two-node cluster: HF_TOKEN from the launching shell reaches the getdata
step (a server that wants the bearer token) and both training ranks, and is found in no file under the run,
data and checkpoint dirs, no log and no /proc/<pid>/cmdline while the job runs."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TOKEN = "hf_SlurmSecret_5f3c9a1e7b2d4c6f"


def _cmdlines_with(needle: bytes) -> list[str]:
    hits = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes():
                    hits.append(proc.name)
            except OSError:
                continue
    return hits


def test_secret_by_reference_reaches_getdata_and_every_rank_and_is_written_nowhere(harness, mtk_venv,
                                                                                    http_servers):
    body = b'{"gated": true}\n'
    hub = http_servers("127.0.0.1", {"/gated/vocab.json": body}, token=TOKEN)
    data = harness.root / "data"
    spec = harness.spec("secret", train={"iterations": 3, "eval_interval": None, "checkpoint.save_interval": 3,
                                         "lr_warmup_iters": 1})
    sets = [f"cluster.slurm.venv={mtk_venv}", "cluster.secrets=[HF_TOKEN]",
            f"data.fetch=[{{url: '{hub.base}/gated/vocab.json', auth: HF_TOKEN, path: gated/vocab.json, "
            f"sha256: {hashlib.sha256(body).hexdigest()}}}]"]

    leaks: list[str] = []
    done = threading.Event()

    def watch() -> None:  # every process on the machine, the cluster's namespaces included, while it runs
        while not done.is_set():
            leaks.extend(_cmdlines_with(TOKEN.encode()))
            done.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run = harness.launch(spec, *sets, env={"HF_TOKEN": TOKEN})
        assert list(harness.run_record(run)["ids"]) == ["getdata", "train"]
        finished = harness.wait_state(run, {"COMPLETED"}, timeout=600)
    finally:
        done.set()
        watcher.join()
    assert finished["exit_code"] == 0
    assert not leaks, f"the token was in the command line of pids {sorted(set(leaks))}"

    # getdata sent it (and only it unlocks the file); both ranks had it, with its full length.
    assert (data / "gated" / "vocab.json").read_bytes() == body
    assert ("/gated/vocab.json", f"Bearer {TOKEN}") in hub.seen
    dumps = sorted((run / "debug").glob("env-*-rank*.json"))
    assert len(dumps) == 2, dumps
    for dump in dumps:
        env = json.loads(dump.read_text())["env"]
        assert env["HF_TOKEN"] == f"<redacted> ({len(TOKEN)} chars)", dump

    logs = harness.mtk("logs", str(run), "--step", "getdata").stdout + harness.mtk("logs", str(run)).stdout
    assert "getdata" in logs and TOKEN not in logs
    scanned = 0
    for root in (run, data, harness.root / "runs"):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert TOKEN.encode() not in path.read_bytes(), path
                scanned += 1
    assert scanned > 10
