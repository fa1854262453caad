"""Every path inside a run dir, in one place: the CLI, the backends, the node steps and the engine ask here.

The names are relative to the run dir (the Slurm script and the PyTorchJob see them through the rendered files);
:class:`RunLayout` joins them onto one run's directory. The checkpoint dir is not among them: it is
``train.checkpoint.dir``, resolved by :func:`mtk.checkpoint_paths.checkpoint_dir`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

JOB_FILE = "job.json"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
LOGS_DIR = "logs"
DEBUG_DIR = "debug"
STATE_DIR = "state"
SAVE_TRIGGER = "triggers/save"
EXIT_TRIGGER = "triggers/exit"
HEARTBEATS_DIR = "state/heartbeats"
HANG_FILE = "state/hang.json"
# The hosts the watchdog blamed, one per line, for the Slurm script (which moves them into EXCLUDED_FILE).
HANG_HOSTS_FILE = "state/hang.hosts"
# The run's excluded nodes, one per line: host, UTC time, reason (tab-separated); every restart passes --exclude.
EXCLUDED_FILE = "state/excluded_nodes"
# Why the engine exited (code, iteration, reason, checkpoint), by rank 0; the node step and `mtk status` read it.
LAST_EXIT_FILE = "state/last_exit.json"
# The preflight health gate: each node's verdict (health/<host>.json), node 0's summary and the failing hosts (one
# per line; the Slurm script reads this name as "$MTK_STATE_DIR/preflight.hosts").
HEALTH_DIR = "state/health"
PREFLIGHT_FILE = "state/preflight.json"
PREFLIGHT_HOSTS_FILE = "state/preflight.hosts"
# The run's dataset is complete and its index cache built (by the preprocess step that merged, or found it done):
# what an EKS training pod's wait-for-data init container waits for. Per run, so no earlier run's outputs count.
DATA_READY_FILE = "state/data-ready.json"
# The local backend's plan (the steps' argv, written at render: it marks a local run dir) and its runner's state.
STEPS_PLAN_FILE = "steps.json"
STEPS_STATE_FILE = "state/steps.json"

@dataclass(frozen=True)
class RunLayout:
    """The paths of one run, joined onto its run dir."""

    run_dir: Path

    @classmethod
    def of(cls, run_dir: str | os.PathLike[str]) -> RunLayout:
        return cls(Path(run_dir))

    @property
    def job_file(self) -> Path:
        return self.run_dir / JOB_FILE

    @property
    def metrics(self) -> Path:
        return self.run_dir / METRICS_FILE

    @property
    def tensorboard(self) -> Path:
        return self.run_dir / TENSORBOARD_DIR

    @property
    def logs(self) -> Path:
        return self.run_dir / LOGS_DIR

    @property
    def debug(self) -> Path:
        return self.run_dir / DEBUG_DIR

    @property
    def state(self) -> Path:
        return self.run_dir / STATE_DIR

    @property
    def save_trigger(self) -> Path:
        return self.run_dir / SAVE_TRIGGER

    @property
    def exit_trigger(self) -> Path:
        return self.run_dir / EXIT_TRIGGER

    @property
    def heartbeats(self) -> Path:
        return self.run_dir / HEARTBEATS_DIR

    @property
    def hang(self) -> Path:
        return self.run_dir / HANG_FILE

    @property
    def excluded(self) -> Path:
        return self.run_dir / EXCLUDED_FILE

    @property
    def last_exit(self) -> Path:
        return self.run_dir / LAST_EXIT_FILE

    @property
    def preflight(self) -> Path:
        return self.run_dir / PREFLIGHT_FILE

    @property
    def preflight_hosts(self) -> Path:
        return self.run_dir / PREFLIGHT_HOSTS_FILE

    def health(self, host: str) -> Path:
        """One node's preflight verdict."""
        return self.run_dir / HEALTH_DIR / f"{host}.json"

    @property
    def data_ready(self) -> Path:
        return self.run_dir / DATA_READY_FILE

    @property
    def steps_plan(self) -> Path:
        return self.run_dir / STEPS_PLAN_FILE

    @property
    def steps_state(self) -> Path:
        return self.run_dir / STEPS_STATE_FILE

    def job_for_nodes(self, nodes: int) -> Path:
        """The job spec fixed to ``nodes`` nodes, for a spare-node range's training step (its world size)."""
        return self.run_dir / STATE_DIR / f"job.{nodes}nodes.json"

    def step_exits(self, job_id: str) -> list[Path]:
        """The exit codes a Slurm job's step recorded (``state/<step>.<job id>.exit``, written by its script)."""
        return sorted((self.run_dir / STATE_DIR).glob(f"*.{job_id}.exit"))
