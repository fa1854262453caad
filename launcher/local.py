"""The embedded default backend: the same steps as a cluster run, on this machine, no container.

``render`` writes the job spec, the step plan and ``run.sh`` (the exact commands, for running by hand);
``submit`` starts a detached runner so the run outlives the terminal and other shells can follow it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path

from mtk import processes, run_layout
from mtk.backends import Artifacts, Backend, LogsError, StepStatus
from mtk.failures import debug_enabled
from mtk.files import open_append
from mtk.netenv import network_env
from mtk.runs import Run
from mtk.spec import Job
from mtk.spec.errors import Problem
from mtk.steps import Step, StepState

from .follow_filter import FollowFilter
from .local_runner import read_state


def step_argv(step: str, run_dir: str) -> list[str]:
    return ["mtk-entrypoint", step, "--job", f"{run_dir}/{run_layout.JOB_FILE}", "--run-dir", run_dir]


def _run_script(job: Job, run_dir: str, steps: list[list[str]], torchrun: list[str], env: dict[str, str]) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# mtk local run of {job.name}: generated, do not edit.",
        "set -euo pipefail",
        f"cd {shlex.quote(run_dir)}",
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    for name in job.cluster.secret_names:  # by reference: the value comes from the shell that runs this
        lines.append(f': "${{{name}:?{name} (cluster.secrets) must be exported in this shell}}"')
    for argv in steps:
        if argv[1] == Step.TRAIN:
            lines.append(f"# train runs: {shlex.join(torchrun)}")
        lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"


# How long ``cancel`` waits for the run to save and end before it kills what is left.
CANCEL_GRACE_SECONDS = 30


class LocalBackend(Backend):
    name = "local"
    previews_in_run_dir = True
    megatron_check_by_default = False  # nothing queues: a refusal comes as soon as the run starts
    follows_by_default = True
    interrupt_cancels = True  # the run lives with this terminal: Ctrl-C stops it (after a checkpoint)
    render_marker = run_layout.STEPS_PLAN_FILE
    spare_nodes_refused = "for Slurm only: the local backend runs on this machine only"

    @classmethod
    def validate(cls, job: Job) -> list[Problem]:
        c = job.cluster
        if c.nodes != 1:
            return [Problem("cluster.nodes", "the local backend runs on this machine only; set nodes: 1 "
                            "(or use --backend slurm/eks)", c.nodes)]
        return []

    def render(self, job: Job, run_dir: str) -> Artifacts:
        from .train_step import torchrun_argv

        steps = [step_argv(s, run_dir) for s in job.steps()]
        torchrun, _ = torchrun_argv(job, run_dir, f"{run_dir}/{run_layout.JOB_FILE}", env={}, program=["torchrun"])
        # The same presets and debug switches as on a cluster (NCCL debug files, ...), then cluster.env.
        env = network_env(job, run_dir)
        plan = {
            "steps": [{"step": s, "argv": argv} for s, argv in zip(job.steps(), steps, strict=True)],
            "env": env,
        }
        files = {
            run_layout.JOB_FILE: job.to_json(),
            run_layout.STEPS_PLAN_FILE: json.dumps(plan, indent=2, sort_keys=True) + "\n",
            "run.sh": _run_script(job, run_dir, steps, torchrun, env),
        }
        return Artifacts(
            backend=self.name,
            run_dir=run_dir,
            files=files,
            commands=steps,
            notes=[f"train runs: {shlex.join(torchrun)}"],
            modes={"run.sh": 0o755},
        )

    def submit(self, job: Job, artifacts: Artifacts, options: Mapping[str, object] | None = None) -> Run:
        run_dir = Path(artifacts.run_dir)
        (run_dir / run_layout.LOGS_DIR).mkdir(parents=True, exist_ok=True)
        with open_append(run_dir / run_layout.LOGS_DIR / "runner.log", binary=True) as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mtk.launcher.local_runner", str(run_dir)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.time() + 10
        while read_state(run_dir).get("runner_pid") != proc.pid and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        return Run(backend=self.name, run_dir=str(run_dir), name=job.name, ids={"runner": str(proc.pid)},
                   backend_notes={"host": socket.gethostname()})

    def submitted_note(self, run: Run, options: Mapping[str, object], stopped: object) -> str:
        """What the ``runner: PID`` line above it is (launch prints each step's id once): the detached process that
        runs the steps, what cancel signals."""
        return (f"(the runner is the process that runs this run's steps, detached from this shell so the run "
                f"outlives it; `mtk cancel {run.run_dir}` ends it)")

    def status(self, run: Run) -> list[StepStatus]:
        runner = int(run.ids.get("runner", "0"))
        alive = processes.alive(runner) and _is_runner_of(runner, run.run_dir)
        # Read after the liveness check: a runner found gone wrote its last state before it went, so a run that
        # has just completed never reads as "runner gone" with its steps still RUNNING.
        state = read_state(run.run_dir)
        out = []
        for step, info in state.get("steps", {}).items():
            recorded = info.get("state")
            s = StepState(recorded) if recorded in StepState.__members__ else StepState.UNKNOWN
            reason = info.get("reason", "")
            if s in (StepState.RUNNING, StepState.PENDING) and not alive and not state.get("done"):
                s, reason = StepState.FAILED, "the runner process is gone (killed?)"
            tail = _tail(info.get("log")) if s == StepState.FAILED else []
            out.append(
                StepStatus(
                    step=step,
                    state=s,
                    id=str(info.get("pid", "")),
                    exit_code=info.get("exit_code"),
                    reason=reason,
                    log_tail=tail,
                    needed=info.get("needed", True),
                )
            )
        return out

    def logs(self, run: Run, follow: bool = False, step: str | None = None, node: str | None = None) -> Iterator[str]:
        logs_dir = Path(run.run_dir) / run_layout.LOGS_DIR
        plan = json.loads(run_layout.RunLayout.of(run.run_dir).steps_plan.read_text())
        names = [s["step"] for s in plan["steps"] if step in (None, s["step"])]
        _check_logs_filter(plan, step, node, run.backend_notes.get("host"))
        runner = int(run.ids.get("runner", "0"))
        quiet = follow and not debug_enabled()  # a followed run shows its own lines (follow_filter.py says which)
        for name in names:
            path = logs_dir / f"{name}.log"
            while follow and not path.exists() and not _finished(run, name, runner):
                time.sleep(0.2)
            if not path.exists():
                continue
            lines = _read_lines(path, follow, partial(_finished, run, name, runner))
            yield from (FollowFilter(str(path))(lines) if quiet else lines)

    def cancel(self, run: Run) -> None:
        """End the runner and every process under it, and return only once they are gone.

        SIGTERM goes to the runner alone: it passes it to the running step, and the train step to the ranks, which
        finish the iteration, save and exit (``exitcodes.REQUEUE``). Nothing signals torchrun's agent (it would
        shut its workers down itself and print a traceback) or a DataLoader worker. Whatever of the tree (taken
        before signalling) still lives after the grace period is killed, so a rank that ignores SIGTERM (hung, or
        stuck in a collective) cannot outlive ``mtk cancel``."""
        pid = int(run.ids.get("runner", "0"))
        if not (processes.alive(pid) and _is_runner_of(pid, run.run_dir)):
            return
        tree = [pid, *_descendants(pid)]
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + CANCEL_GRACE_SECONDS
        while any(processes.alive(p) for p in tree) and time.time() < deadline:
            time.sleep(0.2)
        for p in tree:
            if processes.alive(p):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signal.SIGKILL)
        while any(processes.alive(p) for p in tree) and time.time() < deadline + 10:
            time.sleep(0.1)


def _check_logs_filter(plan: dict, step: str | None, node: str | None, host: str | None) -> None:
    """Refuse a --step or --node this run does not have, rather than print another one's lines (or none)."""
    steps = [s["step"] for s in plan["steps"]]
    if step is not None and step not in steps:
        raise LogsError(f"--step {step!r}: this run has {', '.join(steps)}")
    names = ["0", "localhost", *([host] if host else [])]
    if node is not None and node not in names:
        raise LogsError(f"--node {node!r}: a local run has one node: {' or '.join(repr(n) for n in names)} "
                        "(or leave --node out)")


def _read_lines(path: Path, follow: bool, finished: Callable[[], bool]) -> Iterator[str]:
    """The file's lines, whole ones only while following (a line still being written waits for its end)."""
    with open(path, errors="replace") as fh:
        partial_line = ""
        while True:
            line = fh.readline()
            if line.endswith("\n"):
                yield partial_line + line
                partial_line = ""
                continue
            partial_line += line
            if not follow or finished():
                rest = partial_line + fh.read()
                if rest:
                    yield rest
                return
            time.sleep(0.2)


def _finished(run: Run, step: str, runner: int) -> bool:
    info = read_state(run.run_dir).get("steps", {}).get(step, {})
    ended = (StepState.COMPLETED, StepState.STOPPED, StepState.FAILED, StepState.CANCELLED)
    return info.get("state") in ended or not processes.alive(runner)


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (parent links from /proc: the plain CLI install has no psutil)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def _is_runner_of(pid: int, run_dir: str) -> bool:
    """The pid in run.json may have been reused by an unrelated process since the run ended: signal its
    process group only while it still is this run's runner (``python -m mtk.launcher.local_runner RUN_DIR``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return b"mtk.launcher.local_runner" in argv and os.fsencode(str(run_dir)) in argv


def _tail(path: str | None, lines: int = 15) -> list[str]:
    if not path or not os.path.exists(path):
        return []
    with open(path, errors="replace") as fh:
        return [line.rstrip("\n") for line in fh.readlines()[-lines:]]
