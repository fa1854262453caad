"""A whole backend in one module, registered from outside mtk (``mtk.backends`` entry point in the dist-info
beside it): the test that proves a new backend needs no other file.

Its "scheduler" is this machine: ``submit`` starts the rendered script in its own session and records its pid;
the script stands in for a run (it writes a log line, then sleeps until cancelled).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from mtk import run_layout
from mtk.backends import Artifacts, Backend, StepStatus
from mtk.runs import Run
from mtk.spec.base import Section
from mtk.spec.errors import Problem

SCRIPT = "toy-run.sh"
CANCELLED = "toy.cancelled"


class ToyOptions(Section):
    """The toy backend's own block, ``cluster.toy``: validated by the spec like a built-in's."""

    greeting: str = "started"


class ToyBackend(Backend):
    name = "toy"
    megatron_check_by_default = False
    render_marker = SCRIPT
    options = ToyOptions

    @classmethod
    def validate(cls, job) -> list[Problem]:
        if job.cluster.nodes > 1:
            return [Problem("cluster.nodes", "the toy backend runs one node; set nodes: 1", job.cluster.nodes)]
        return []

    def render(self, job, run_dir: str) -> Artifacts:
        log = f"{run_dir}/{run_layout.LOGS_DIR}/toy.log"
        options = job.cluster.block(self.name)
        assert isinstance(options, ToyOptions)
        script = "\n".join(["#!/bin/sh", f"mkdir -p {shlex.quote(os.path.dirname(log))}",
                            f"echo {shlex.quote(f'toy run of {job.name} {options.greeting}')} >> {shlex.quote(log)}",
                            "exec sleep 600", ""])
        return Artifacts(backend=self.name, run_dir=run_dir, files={run_layout.JOB_FILE: job.to_json(), SCRIPT: script},
                         commands=[["sh", f"{run_dir}/{SCRIPT}"]], modes={SCRIPT: 0o755})

    def submit(self, job, artifacts: Artifacts, options=None) -> Run:
        proc = subprocess.Popen(["sh", f"{artifacts.run_dir}/{SCRIPT}"], start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return Run(backend=self.name, run_dir=artifacts.run_dir, name=job.name, ids={"train": str(proc.pid)})

    def status(self, run: Run) -> list[StepStatus]:
        pid = run.ids["train"]
        if _alive(int(pid)):
            state = "RUNNING"
        else:
            state = "CANCELLED" if (Path(run.run_dir) / CANCELLED).exists() else "COMPLETED"
        return [StepStatus(step="train", state=state, id=pid)]

    def logs(self, run: Run, follow: bool = False, step: str | None = None, node: str | None = None) -> Iterator[str]:
        path = Path(run.run_dir) / run_layout.LOGS_DIR / "toy.log"
        yield from path.read_text().splitlines(keepends=True) if path.exists() else []

    def cancel(self, run: Run) -> None:
        pid = int(run.ids["train"])
        (Path(run.run_dir) / CANCELLED).touch()
        if _alive(pid):
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Running and not a zombie (the launching `mtk` exited, so nobody reaps it but init)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
