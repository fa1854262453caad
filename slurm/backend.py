"""The Slurm backend: sbatch chains with Pyxis or a bare venv/conda env, status, logs and cancel.

``render`` is :mod:`mtk.slurm.render` (pure). ``submit`` chains the steps with ``--dependency=afterok``.
``status`` asks squeue, then ``scontrol show job``, then sacct (only when the cluster has accounting), then
the exit files the batch scripts leave in ``<run dir>/state/``; Slurm's states are mapped through one table.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mtk import run_layout
from mtk.backends import Artifacts, Backend, LogsError, StepStatus
from mtk.files import atomic_write
from mtk.runs import Run
from mtk.steps import Step, StepState

from . import logfiles
from .commands import JobInfo, Slurm
from .render import gpus_requested_at_submit, job_base, plan, render, submit_argv

if TYPE_CHECKING:
    from mtk.spec import Job
    from mtk.spec.errors import Problem

# Slurm job state -> mtk's neutral state. Anything else is UNKNOWN.
_BY_NEUTRAL_STATE = {
    StepState.PENDING: ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                        "SUSPENDED"),
    StepState.RUNNING: ("RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "STOPPED"),
    StepState.COMPLETED: ("COMPLETED",),
    StepState.FAILED: ("FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED",
                       "SPECIAL_EXIT"),
    StepState.CANCELLED: ("CANCELLED", "REVOKED"),
}
STATES: dict[str, StepState] = {slurm: ours for ours, theirs in _BY_NEUTRAL_STATE.items() for slurm in theirs}
ACTIVE = (StepState.PENDING, StepState.RUNNING)
FINAL_REASONS = {
    "stopped": "stopped by the exit trigger (mtk stop); checkpoint saved, nothing requeued",
    "guardrail": "stopped by the guardrail: too many failures in a row without checkpoint progress",
    "cancelled": "cancelled with mtk cancel",
    "bad-input": "stopped on bad input (exit 2): the train log names the file and the fix; not restarted",
}


def neutral(slurm_state: str) -> StepState:
    return STATES.get(slurm_state.split()[0].rstrip("+") if slurm_state else "", StepState.UNKNOWN)


class SlurmBackend(Backend):
    name = "slurm"
    title = "Slurm"
    excludes_nodes = True
    runs_nsys = True
    render_marker = "train.sbatch"

    @classmethod
    def validate(cls, job: Job) -> list[Problem]:
        from .rules import problems

        return problems(job)

    def __init__(self, slurm: Slurm | None = None):
        self._slurm = slurm
        self._known: dict[tuple[str | None, str], JobInfo | None] = {}  # (slurm_conf, job id): what prefetch got

    def _client(self, run: Run | None = None) -> Slurm:
        if self._slurm is None:
            conf = (run.backend_notes.get("slurm_conf") if run else None) or os.environ.get("SLURM_CONF")
            self._slurm = Slurm(conf)
        return self._slurm

    # -- render / submit ------------------------------------------------------------------------------

    def render(self, job: Job, run_dir: str) -> Artifacts:
        return render(job, run_dir)

    def launch_problems(self, job: Job, run_dir: str) -> list[Problem]:
        """Before a real launch writes or submits anything: sbatch must be on PATH (else no run dir is written that
        claims a submission) and the Pyxis image a readable file here."""
        import shutil

        from .commands import SlurmUnreachable, not_on_path
        from .image_check import image_problems

        problems = image_problems(job)
        if problems:  # the spec's own problems first: they need no cluster to be found
            return problems
        if self._slurm is None and shutil.which("sbatch") is None:
            raise SlurmUnreachable(not_on_path("sbatch"))
        self._client().ping()
        return []

    def submit(self, job: Job, artifacts: Artifacts, options: Mapping[str, object] | None = None) -> Run:
        """sbatch each step after the previous one; if a later sbatch is refused, cancel the earlier ones."""
        slurm = self._client()
        subs = plan(job, artifacts.run_dir)
        s = job.cluster.slurm
        values = {"cluster.slurm.partition": s.partition, "cluster.slurm.account": s.account,
                  "cluster.slurm.qos": s.qos, "cluster.slurm.time": s.time, "cluster.slurm.mem": s.mem,
                  "cluster.slurm.cpus_per_task": s.cpus_per_task, "cluster.nodes": job.cluster.nodes,
                  "cluster.procs_per_node": job.cluster.procs_per_node}
        for sub_dir in (run_layout.LOGS_DIR, run_layout.STATE_DIR):  # slurmd opens the log before the script runs
            Path(artifacts.run_dir, sub_dir).mkdir(parents=True, exist_ok=True)
        ids: dict[str, str] = {}
        try:
            for sub in subs:
                argv = submit_argv(sub, ids.get(sub.after or ""), bool(job.cluster.secrets))
                if gpus_requested_at_submit(job, sub.step) and slurm.gpu_gres(s.partition):
                    argv.insert(-1, f"--gpus-per-node={job.cluster.procs_per_node}")
                ids[sub.step] = slurm.submit(argv, values)
        except BaseException:
            slurm.cancel(ids.values())
            raise
        extra: dict[str, object] = {"job_names": {sub.step: sub.job_name for sub in subs}}
        if os.environ.get("SLURM_CONF"):
            extra["slurm_conf"] = os.environ["SLURM_CONF"]
        return Run(backend=self.name, run_dir=artifacts.run_dir, name=job.name, ids=ids, backend_notes=extra)

    # -- status ---------------------------------------------------------------------------------------

    def jobs(self, run: Run) -> list[tuple[str, str]]:
        """(step label, job id) for every job of the run, including successors queued by the train job."""
        out = list(run.ids.items())
        for i, job_id in enumerate(_successors(run), start=2):
            out.append((f"train#{i}", job_id))
        return out

    def prefetch(self, runs: list[Run]) -> None:
        """Ask Slurm once about every job of these runs (``mtk ls``): one squeue for all (in chunks), scontrol
        for the jobs it still knows, one sacct for the rest; :meth:`status` then answers from that. Asked run by
        run it was three or four Slurm calls each, 15 ms apiece even here: 1,000 runs took ~30 s
        (benchmarks/scale_launcher.py)."""
        by_conf: dict[str | None, list[str]] = {}
        for run in runs:
            by_conf.setdefault(self._conf(run), []).extend(job_id for _, job_id in self.jobs(run))
        for conf, ids in by_conf.items():
            slurm = self._slurm if self._slurm is not None else Slurm(conf)
            info: dict[str, JobInfo] = {}
            for chunk in _chunks(ids):
                info.update(slurm.squeue(chunk))
            for job_id, rec in slurm.scontrol(list(info)).items():  # exit codes, restarts: live jobs only
                rec.state, rec.reason = info[job_id].state, rec.reason or info[job_id].reason
                info[job_id] = rec
            for chunk in _chunks([i for i in ids if i not in info]):
                info.update(slurm.sacct(chunk))
            self._known.update({(conf, i): info.get(i) for i in ids})

    @staticmethod
    def _conf(run: Run) -> str | None:
        return run.backend_notes.get("slurm_conf") or os.environ.get("SLURM_CONF")

    def query(self, run: Run, ids: list[str], detail: bool = True) -> dict[str, JobInfo]:
        """squeue for every id at once; scontrol for exit codes, restarts and jobs squeue lacks; sacct
        (accounting clusters only) and then the run dir's exit files for jobs Slurm has forgotten. Jobs
        :meth:`prefetch` asked about are answered from its answers."""
        conf = self._conf(run)
        if ids and all((conf, i) in self._known for i in ids):
            info = {i: rec for i in ids if (rec := self._known[(conf, i)]) is not None}
            return self._from_exit_files(run, ids, info)
        slurm = self._client(run)
        info = slurm.squeue(ids)
        # scontrol adds what squeue lacks: exit code, restarts, log path.
        for job_id, rec in (slurm.scontrol(ids) if detail else {}).items():
            if job_id in info:
                rec.state, rec.reason = info[job_id].state, rec.reason or info[job_id].reason
            info[job_id] = rec
        missing = [i for i in ids if i not in info]
        if missing:
            info.update(slurm.sacct(missing))
        return self._from_exit_files(run, ids, info)

    @staticmethod
    def _from_exit_files(run: Run, ids: list[str], info: dict[str, JobInfo]) -> dict[str, JobInfo]:
        """Jobs Slurm no longer knows: what their step recorded in the run dir, when it did."""
        for job_id in [i for i in ids if i not in info]:
            code = _exit_file(run, job_id)
            if code is not None:
                info[job_id] = JobInfo(id=job_id, state="COMPLETED" if code == 0 else "FAILED",
                                       exit_code=code, source="run dir")
        return info

    def status(self, run: Run) -> list[StepStatus]:
        jobs = self.jobs(run)
        info = self.query(run, [i for _, i in jobs])
        final = _final(run)
        out = []
        for label, job_id in jobs:
            rec = info.get(job_id)
            if rec is None:
                out.append(StepStatus(label, StepState.UNKNOWN, job_id, reason="Slurm no longer knows this job and "
                                      "the run dir has no exit record"))
                continue
            state = neutral(rec.state)
            st = StepStatus(label, state, job_id, exit_code=None if state in ACTIVE else rec.exit_code,
                            reason=self._reason(run, label, rec, final),
                            needed=not _not_needed(label, state, final))
            if label == Step.PREPROCESS:  # a sharded preprocess: shards done / total, slowest task
                from mtk.data_jobs.shard_status import shard_summary

                st.reason = "; ".join(p for p in (st.reason, shard_summary(f"{run.run_dir}/job.json")) if p)
            if st.state == StepState.FAILED:
                step = label.split("#")[0]
                path = Path(rec.stdout) if rec.stdout and "%" not in rec.stdout else \
                    logfiles.log_path(run.run_dir, step, job_id)
                try:
                    st.log_tail = logfiles.failing_tail(path.read_text(errors="replace"))
                except OSError:
                    st.log_tail = [f"(no log at {path})"]
            out.append(st)
        if final == "stopped":
            _mark_stopped(run, out)
        return out

    def _reason(self, run: Run, label: str, rec: JobInfo, final: str | None) -> str:
        parts = []
        state = neutral(rec.state)
        if rec.state not in STATES or rec.state != state:
            parts.append(rec.state.lower())
        if rec.reason == "DependencyNeverSatisfied":
            parts.append("cancelled because the step before it failed")
        elif rec.reason and state == StepState.PENDING:
            parts.append(f"waiting: {rec.reason}")
        elif rec.reason and rec.reason not in ("NonZeroExitCode",):
            parts.append(rec.reason)
        if rec.restarts:
            parts.append(f"restarts={rec.restarts}")
        if label.startswith(Step.TRAIN):
            event = _last_event(run, rec.id)
            if event:
                parts.append(event)
            if _not_needed(label, state, final):
                parts.append("not needed: the run completed" if final == "completed"
                             else "not needed: the run was stopped (mtk stop)")
            elif final in FINAL_REASONS and state not in ACTIVE:
                parts.append(FINAL_REASONS[final])
        if rec.signal and state != StepState.CANCELLED:
            parts.append(f"killed by signal {rec.signal}")
        return "; ".join(parts)

    # -- logs -----------------------------------------------------------------------------------------

    def logs(self, run: Run, follow: bool = False, step: str | None = None,
             node: str | None = None) -> Iterator[str]:
        step = step or _latest_step(run)
        if step not in run.ids:
            raise LogsError(f"--step {step!r}: this run has {', '.join(run.ids)}")
        done: set[str] = set()
        while True:
            ids = [run.ids[step], *(_successors(run) if step == Step.TRAIN else [])]
            todo = [i for i in ids if i not in done]
            if not todo:
                return
            job_id = todo[0]
            path = logfiles.log_path(run.run_dir, step, job_id)
            tasks = logfiles.array_logs(run.run_dir, step, job_id)
            if tasks:  # a job array (sharded preprocess): one file per task; --node: a task index or a host
                for task_path in logfiles.pick_tasks(tasks, node):
                    yield from logfiles.read_lines(task_path)
                done.add(job_id)
                continue
            if not follow:
                yield from logfiles.read_lines(path, _node_index(run, job_id, node))
                done.add(job_id)
                continue
            yield from self._follow(run, step, job_id, path, node)
            done.add(job_id)
            if _final(run) is not None and step == Step.TRAIN:
                return

    def _follow(self, run: Run, step: str, job_id: str, path: Path, node: str | None) -> Iterator[str]:
        """Stream one job's log until the job has ended (a requeued job keeps its file: keep going)."""
        tail = logfiles.Tail(path)
        index = None
        while True:
            if index is None and node is not None:
                hosts = logfiles.node_hosts(run.run_dir, job_id)
                index = logfiles.node_index(node, hosts) if (hosts or node.isdigit()) else None
            lines = tail.read()
            for line in lines:
                if node is None or (index is not None and logfiles.keep(line, index)):
                    yield line
            rec = self.query(run, [job_id], detail=False).get(job_id, JobInfo(job_id, "UNKNOWN"))
            state = neutral(rec.state)
            if state not in ACTIVE:
                for line in tail.read(final=True):
                    if node is None or (index is not None and logfiles.keep(line, index)):
                        yield line
                return
            if not lines:
                time.sleep(1.0)

    # -- cancel ---------------------------------------------------------------------------------------

    def cancel(self, run: Run, wait: float = 120.0) -> None:
        """scancel every job of the run (ids, successors, and by name); safe to repeat. Waits until Slurm
        reports none of them pending or running, so nothing of the run is left when this returns."""
        final = Path(run.run_dir) / run_layout.STATE_DIR / "final"
        if not final.exists():
            atomic_write(final, "cancelled\n")
        slurm = self._client(run)
        ids = [i for _, i in self.jobs(run)]
        names = list(run.backend_notes.get("job_names", {}).values()) or \
            [f"{job_base(run.run_dir)}-{s}" for s in run.ids]
        slurm.cancel(ids, names)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            info = slurm.squeue(ids)
            if not any(neutral(rec.state) in ACTIVE for rec in info.values()):
                return
            time.sleep(0.5)


def _chunks(ids: list[str], size: int = 500) -> list[list[str]]:
    """Job ids in argv-sized groups (a --jobs list of thousands stays well under ARG_MAX)."""
    return [ids[i:i + size] for i in range(0, len(ids), size)]


def _state_file(run: Run, name: str) -> Path:
    return Path(run.run_dir) / run_layout.STATE_DIR / name


def _successors(run: Run) -> list[str]:
    try:
        text = _state_file(run, "successors").read_text()
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip().isdigit()]


def _final(run: Run) -> str | None:
    try:
        return _state_file(run, "final").read_text().strip() or None
    except OSError:
        return None


def _not_needed(label: str, state: str, final: str | None) -> bool:
    """A queued successor (train#N) that the script cancelled because the run had ended as it should: completed,
    or stopped by ``mtk stop``. Nothing was left for it to resume, so it is not a cancellation of the run."""
    return "#" in label and state == StepState.CANCELLED and final in ("completed", "stopped")


STOP_EVENT = "stopped by the exit trigger"  # the event step.sh.j2 writes for the job that honoured ``mtk stop``


def _mark_stopped(run: Run, steps: list[StepStatus]) -> None:
    """The run's ``final`` is ``stopped``: the train job that honoured the exit trigger is STOPPED, as a local run
    shows it. On Slurm that job exits 0 on purpose (nothing requeues it and the chain's cancel is the script's, not
    a failure), so Slurm calls it COMPLETED; the job is the one whose event says so (state/events.log), else the
    last train job Slurm calls COMPLETED."""
    train = [s for s in steps if s.step.split("#")[0] == Step.TRAIN and s.state == StepState.COMPLETED]
    stopped = [s for s in train if _last_event(run, s.id).startswith(STOP_EVENT)] or train[-1:]
    for s in stopped:
        s.state = StepState.STOPPED


def _exit_file(run: Run, job_id: str) -> int | None:
    for path in run_layout.RunLayout.of(run.run_dir).step_exits(job_id):
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None
    return None


def _last_event(run: Run, job_id: str) -> str:
    """The newest line of state/events.log about this job, without its timestamp and ids."""
    try:
        lines = _state_file(run, "events.log").read_text().splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        parts = line.split(" ", 4)
        if len(parts) == 5 and parts[2] == job_id and not parts[4].startswith("start "):
            return parts[4]
    return ""


def _latest_step(run: Run) -> str:
    """The last step whose log exists (what is running or just ran), else the first step."""
    steps = list(run.ids)
    for step in reversed(steps):
        if logfiles.log_path(run.run_dir, step, run.ids[step]).exists():
            return step
    return steps[0]


def _node_index(run: Run, job_id: str, node: str | None) -> int | None:
    return logfiles.node_index(node, logfiles.node_hosts(run.run_dir, job_id))
