"""``mtk-entrypoint train``: run torchrun for this node and translate the outcome into one exit code.

Why not ``exec torchrun``: torchrun's agent swallows SIGUSR2 (Slurm's "time is nearly up" signal) and
reports any non-zero worker exit as a plain failure. So this process stays the parent, forwards SIGUSR2 and
SIGTERM straight to the training workers (they finish the iteration, save, exit), and afterwards reads the
engine's ``state/last_exit.json`` to return REQUEUE / STOPPED instead of a generic 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from mtk import exitcodes, run_layout
from mtk.rendezvous import from_environment, node_place
from mtk.run_layout import RunLayout

FORWARDED = (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
# Signals Slurm/Kubernetes use to end a step, and Ctrl-C; handled, not fatal, so the workers can save first.


def torchrun_argv(
    job, run_dir: str, job_file: str, env: dict[str, str] | None = None, program: list[str] | None = None
) -> tuple[list[str], str]:
    """The full torchrun command for this node, and a node label for log lines."""
    rdzv = from_environment(job, os.environ if env is None else env)
    program = program or [sys.executable, "-m", "mtk.launcher.quiet_torchrun"]  # torchrun (quiet_torchrun.py says why)
    worker = ["-m", "mtk.training.worker", "--job", job_file, "--run-dir", run_dir]
    return [*program, *rdzv.args, *worker], rdzv.node


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (psutil: the ``train`` extra, installed wherever this step runs torchrun)."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


def _is_worker(pid: int) -> bool:
    import psutil

    try:
        return "LOCAL_RANK" in psutil.Process(pid).environ()
    except psutil.Error:  # gone, or not ours to read
        return False


def training_workers(agent_pid: int) -> list[int]:
    """The agent's worker processes (they carry LOCAL_RANK), not their DataLoader workers or helpers.

    A signal meant for "save and exit" must reach exactly the ranks: a DataLoader worker killed by it takes
    its rank down before the checkpoint is written.
    """
    return [pid for pid in _children(agent_pid) if _is_worker(pid)]


def _forward(agent: subprocess.Popen, received: list[int]):
    def handler(signum, _frame):
        received.append(signum)
        name = signal.Signals(signum).name
        if signum == signal.SIGINT:  # Ctrl-C reached torchrun too (one terminal group), which passes it on itself:
            # a second SIGINT would tell the workers not to wait for their save
            print(f"mtk: {name} received: the workers save and exit (Ctrl-C again: at once)", flush=True)
            return
        workers = training_workers(agent.pid)
        print(f"mtk: {name} received, forwarding to {len(workers)} worker process(es) to save and exit", flush=True)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        if not workers and signum == signal.SIGTERM:  # no rank started yet, so nothing to save: end torchrun
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent.pid, signum)

    return handler


def start_agent(cmd: list[str], received: list[int]) -> subprocess.Popen:
    """torchrun, with this step's signals forwarded to it. A SIGTERM/SIGINT while it is being started is kept
    and acted on once it runs: by default it would end this step and leave torchrun and its ranks running with
    no one to stop them. (SIGUSR2 stays ignored meanwhile: a handled signal is reset to its default in the child,
    and torchrun must start with it ignored.)"""
    early: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: early.append(signum))
    agent = subprocess.Popen(cmd, env={**os.environ, "MTK_UNDER_AGENT": "1"})
    forward = _forward(agent, received)
    for sig in FORWARDED:
        signal.signal(sig, forward)
    if early:  # a Ctrl-C before torchrun existed never reached it either: stop it as a SIGTERM does
        forward(signal.SIGTERM, None)
    return agent


ORPHAN_GRACE_SECONDS = 900.0
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    """Adopt ranks orphaned by a dying torchrun (Linux only; elsewhere a no-op)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reap_orphans(grace: float) -> None:
    """Wait for adopted ranks to exit (they may be writing a checkpoint); kill what is left after ``grace``."""
    deadline = time.monotonic() + grace
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if time.monotonic() > deadline:
            for child in _children(os.getpid()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            grace, deadline = 0.0, time.monotonic() + 5
        time.sleep(0.2)


def read_last_exit(run_dir: str, since: float) -> dict | None:
    """The engine's account of why it stopped, if written during this attempt."""
    path = RunLayout.of(run_dir).last_exit
    try:
        if path.stat().st_mtime + 1 < since:
            return None
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def outcome(agent_rc: int, last_exit: dict | None, signalled: bool, restarts_failed_containers: bool = False) -> int:
    """One exit code for the scheduler: the engine's REQUEUE/STOPPED, and USAGE for a refusal it stated in one
    line (its workers exit 0 under torchrun so that no traceback buries it), win over torchrun's own result.

    Where the scheduler restarts a container that exits non-zero (a PyTorchJob's restartPolicy OnFailure), a
    deliberate stop must exit 0, or the container restarts and trains on after ``mtk stop``.
    """
    if last_exit and last_exit.get("code") in (exitcodes.REQUEUE, exitcodes.STOPPED, exitcodes.USAGE):
        if restarts_failed_containers and last_exit["code"] == exitcodes.STOPPED:
            return exitcodes.OK
        return int(last_exit["code"])
    if signalled and agent_rc != 0:
        return exitcodes.FAILED
    return agent_rc


def _start_hang_monitor(job, run_dir: str, agent: subprocess.Popen) -> dict:
    """Watch every rank's heartbeat beside torchrun (``mtk.training.watchdog``); on a hang, dump and kill."""
    state: dict = {"monitor": None, "verdict": None}
    if not job.resilience.watchdog.enabled:
        return state
    import threading

    from mtk.training.watchdog import HangMonitor

    monitor = state["monitor"] = HangMonitor(run_dir, job.resilience.watchdog)

    def watch() -> None:
        verdict = monitor.watch()
        if verdict is None:
            return
        state["verdict"] = verdict
        path = monitor.record(verdict)
        print(f"mtk: HANG on node {socket.gethostname()}: {verdict.reason}; stacks into "
              f"{Path(run_dir) / run_layout.DEBUG_DIR}, verdict in {path}; stopping with exit code {exitcodes.HANG}",
              flush=True)
        monitor.dump_and_kill(agent.pid, training_workers(agent.pid))

    threading.Thread(target=watch, name="mtk-hang-monitor", daemon=True).start()
    return state


def job_for_node_count(job, run_dir: str, nodes: int) -> str:
    """With spare nodes (``cluster.nodes: MIN:MAX``) this attempt trains on ``nodes`` healthy nodes: the workers get
    the job with exactly that node count (``state/job.<N>nodes.json``), so the world size, DP and gradient
    accumulation (global batch kept) are derived from it like for any fixed-size job."""
    from mtk.files import atomic_write

    fixed = job.model_copy(deep=True)
    fixed.cluster.nodes, fixed.cluster.min_nodes = nodes, None
    path = run_layout.RunLayout.of(run_dir).job_for_nodes(nodes)
    atomic_write(path, fixed.to_json())  # every node writes the same bytes
    return str(path)


def _exclude_blamed(run_dir: str, verdict) -> None:
    """Under a PyTorchJob, add the blamed nodes to ``state/excluded_nodes``: the relaunch renders them as node
    anti-affinity (on Slurm the batch script records them and passes --exclude)."""
    from mtk.exclusions import add_excluded

    for host in verdict.hosts:
        try:
            if add_excluded(run_dir, host, f"hang watchdog (pod {socket.gethostname()}): stopped reporting "
                                           "progress, see state/hang.json"):
                print(f"mtk: node {host} added to {Path(run_dir) / run_layout.EXCLUDED_FILE}; a relaunch "
                      "(mtk launch with the same checkpoint dir) avoids it", flush=True)
        except (OSError, ValueError) as exc:
            print(f"mtk: could not record node {host!r} as excluded: {exc}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mtk-entrypoint train", description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, help="job.json written by mtk launch")
    parser.add_argument("--run-dir", default=None, help="run directory (default: the job file's folder)")
    parser.add_argument("--print", dest="print_only", action="store_true", help="print the torchrun command only")
    args = parser.parse_args(argv)

    from mtk.spec import load_job_json

    from .ckpt_precheck import check_resume_checkpoint_once

    job_file = os.path.abspath(args.job)
    run_dir = os.path.abspath(args.run_dir or os.path.dirname(job_file))
    if not os.path.isfile(job_file):
        raise exitcodes.BadInput(f"--job {job_file} does not exist (expected the run's job.json)")
    job = load_job_json(job_file)
    check_resume_checkpoint_once(job, run_dir)  # before any rank starts: a damaged checkpoint is named once per job
    cmd, node = torchrun_argv(job, run_dir, job_file)  # an unusable rendezvous: RendezvousError (bad input)
    if job.cluster.min_nodes is not None:  # spare nodes: the workers see the node count of this attempt
        world_file = job_for_node_count(job, run_dir, int(cmd[cmd.index("--nnodes") + 1]))
        cmd, node = torchrun_argv(job, run_dir, world_file)
    if args.print_only:
        print(shlex.join(cmd))
        return exitcodes.OK

    place = node_place(os.environ)
    print(f"mtk: node {socket.gethostname()} ({node}) restart {place.restarts}: {shlex.join(cmd)}", flush=True)
    started = time.time()
    received: list[int] = []
    # The forwarding handler finds the workers with psutil: imported here, not first inside a handler that can
    # interrupt the hang monitor's thread importing it ("partially initialized module 'psutil'").
    import psutil  # noqa: F401

    _become_subreaper()
    # srun delivers a forwarded SIGUSR2 to every process of the step, torchrun included, and torchrun dies
    # of it (default action) while its workers are still saving. An ignored disposition survives exec, so
    # torchrun starts with SIGUSR2 ignored; the engine installs its own handler in every rank.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    # Workers that stop on purpose (signal, exit trigger) exit 0 under an agent, so that an elastic agent
    # does not restart them; the reason travels in state/last_exit.json.
    agent = start_agent(cmd, received)
    hang = _start_hang_monitor(job, run_dir, agent)
    rc = agent.wait()  # PEP 475: the wait resumes after a forwarded signal
    hang["monitor"] and hang["monitor"].stop()
    # If the agent died first, its ranks were re-parented to us: let them finish their save before we
    # read last_exit.json and report.
    _reap_orphans(ORPHAN_GRACE_SECONDS)
    restarted = place.restarts_failed_containers
    code = outcome(rc, read_last_exit(run_dir, started), bool(received), restarted)
    if hang.get("verdict") is not None:
        code = exitcodes.HANG
        if restarted:  # no batch script here to record the blame: the run's state does, for the relaunch
            _exclude_blamed(run_dir, hang["verdict"])
    print(f"mtk: node {node} torchrun exited {rc}; step exit code {code}", flush=True)
    return code
