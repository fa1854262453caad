"""One writer per checkpoint dir (issue 44, item 3): launches of one job started together — real ``mtk launch``
processes on the local backend, released at once — train exactly once. The checkpoint dir's lease is taken by
``mtk launch`` itself, atomically, before anything is submitted, so every other launch is refused at once (exit 2,
the holder's run named) and leaves no run dir; the one that trains leaves an intact checkpoint that a relaunch
resumes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
N = 3


def test_of_launches_started_together_exactly_one_trains_and_the_others_are_refused_naming_it(tmp_path):
    ckpt = tmp_path / "ckpt"

    def launch_argv(iterations: int) -> list[str]:
        sets = ("name=same", f"train.iterations={iterations}", "train.checkpoint.save_interval=2",
                "train.lr_warmup_iters=1", f"train.checkpoint.dir={ckpt}")
        return [sys.executable, "-m", "mtk", "launch", str(ROOT / "examples" / "tiny.yaml"), "--backend", "local",
                *[a for s in sets for a in ("--set", s)]]

    argv = launch_argv(2)
    go = tmp_path / "go"  # the barrier: every launch waits for it, then all start at once
    procs = [subprocess.Popen(["sh", "-c", f'while [ ! -e "{go}" ]; do sleep 0.01; done; exec "$@"', "sh", *argv],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(N)]
    go.touch()
    outs = [(p.wait(timeout=900), *p.communicate()) for p in procs]

    trained = [(out, err) for rc, out, err in outs if rc == 0]
    refused = [err for rc, _, err in outs if rc == 2]
    assert len(trained) == 1 and len(refused) == N - 1, [(rc, err[-2000:]) for rc, _, err in outs]
    winner = Path([ln for ln in trained[0][0].splitlines() if ln.startswith("run: ")][-1].removeprefix("run: "))
    for err in refused:
        assert f"{ckpt} is being written by run {winner} (host " in err, err
        assert f"mtk cancel {winner}" in err and "Traceback" not in err, err
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [winner.name], "a refused launch left a run dir"

    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (ckpt / "iter_0000002" / ".metadata").is_file() and not list(ckpt.glob("*.partial"))
    assert not (ckpt / ".mtk-writer.json").exists(), "the run gives its lease back when it ends"

    again = subprocess.run(launch_argv(3), cwd=tmp_path, capture_output=True,
                           text=True, timeout=900)  # the same checkpoint dir, now free: resumed, not restarted
    assert again.returncode == 0, again.stderr[-3000:]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert "iteration        1/" not in again.stdout and "iteration        3/" in again.stdout, again.stdout[-3000:]
