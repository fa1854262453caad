"""Pipes (issue 44, item 4): a verb whose reader closes the pipe (``mtk logs | head -1``) ends quietly with exit 0
— no ``error: Broken pipe``, no interpreter complaint at exit. Each verb runs in a real shell pipeline into
``head -1`` with more output than a pipe holds (checked), so the writer always meets the closed pipe."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PIPE_CAPACITY = 65536  # Linux's default; every verb below writes more
LONG = "x" * 200


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A runs dir with many long-named runs (ls), one run with a long log whose step failed (logs, status: the
    failure's log tail), metrics dirs to compare (report) and a spec with a large environment (validate)."""
    from mtk.runs import Run

    root = tmp_path_factory.mktemp("pipes")
    runs = root / "runs"
    for i in range(400):
        d = runs / f"{LONG}-{i:04d}"
        d.mkdir(parents=True)
        Run(backend="local", run_dir=str(d), name=f"{LONG}-{i}", created=1.7e9 + i).save()
    big = runs / "big-20260101-000000"
    (big / "logs").mkdir(parents=True)
    log = big / "logs" / "train.log"
    log.write_text("".join(f"iteration {i} " + "y" * 6000 + "\n" for i in range(100)))
    (big / "steps.json").write_text(json.dumps({"steps": [{"step": "train", "argv": ["true"]}], "env": {}}))
    (big / "state").mkdir()
    (big / "state" / "steps.json").write_text(json.dumps(
        {"done": True, "steps": {"train": {"state": "FAILED", "exit_code": 1, "log": str(log)}}}))
    Run(backend="local", run_dir=str(big), name="big", ids={"runner": "0"}, created=2e9,
        extra={"host": socket.gethostname()}).save()
    for i in range(300):
        metrics = root / "m" / f"{LONG}-{i:04d}" / "metrics.jsonl"
        metrics.parent.mkdir(parents=True)
        metrics.write_text("".join(json.dumps({"kind": "train", "iteration": it, "lm_loss": 5.0 - it / 10,
                                               "tokens_per_s": 100.0, "step_time_ms": 10.0, "time": 1.7e9 + it})
                                   + "\n" for it in (1, 2, 3)))
    spec = yaml.safe_load((EXAMPLES / "tiny.yaml").read_text())
    spec["cluster"]["env"] = {f"VAR_{i}": LONG for i in range(400)}
    (root / "big.yaml").write_text(yaml.safe_dump(spec))
    return root


VERBS = {
    "logs": ["logs", "big"],
    "ls": ["ls"],
    "ls --json": ["ls", "--json"],
    "status": ["status", "big"],
    "status --json": ["status", "--json", "big"],
    "report": ["report", "--no-plots", "--no-wandb", *[f"m/{LONG}-{i:04d}" for i in range(300)]],
    "validate": ["validate", "big.yaml", "--no-megatron"],
    "prune": ["prune"],  # without --yes: only says what would go
    "schema": ["schema"],
}


@pytest.mark.parametrize("verb", VERBS)
def test_a_verb_piped_into_head_ends_quietly_with_0(work, verb):
    argv = [sys.executable, "-m", "mtk", *VERBS[verb]]
    full = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=300)
    assert full.returncode in (0, 1), full.stderr  # status of a failed run exits 0 too; the output is what counts
    assert len(full.stdout.encode()) > PIPE_CAPACITY, f"{verb} wrote {len(full.stdout)} bytes: the pipe never fills"
    # stderr of the whole pipeline, then mtk's own exit status (PIPESTATUS) on the last line
    script = f'{shlex.join(argv)} 2>"$ERR" | head -1; echo "${{PIPESTATUS[0]}}" >>"$ERR"'
    err = work / f"stderr-{verb.replace(' ', '')}"
    piped = subprocess.run(["bash", "-c", script], cwd=work, env={"ERR": str(err), "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=300)
    assert piped.stdout == full.stdout.splitlines(keepends=True)[0]
    said = err.read_text().splitlines()
    assert said[-1] == str(full.returncode), said
    assert said[:-1] == full.stderr.splitlines(), said  # nothing more than unpiped: no error, no traceback
