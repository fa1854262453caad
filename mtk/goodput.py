"""Goodput you can plan: effective training time at N nodes, and the checkpoint interval that maximises it.

A job of N nodes fails every ``MTBF_job = MTBF_node / N`` hours on average. Each failure costs the restart path
(detect, exit, requeue or reschedule, image start, rendezvous, NCCL init, checkpoint load, first step) plus the
work since the last checkpoint (half an interval on average); each save costs its blocking time. Young (1974)
and Daly (2006): the interval that minimises the loss is ``T* ≈ √(2 × save cost × MTBF_job)``; the fraction of
wall time that trains is then ``1 − δ/T − (T/2 + R)/M`` (first order, δ the save cost, R the restart, M the job's
MTBF). ``mtk validate`` and ``mtk launch`` print both for the spec's node count.

The save cost comes from what the job's earlier runs recorded (``<run dir>/state/checkpoint_saves.jsonl``, one
line per save, written by the engine's checkpoint manager; the median blocking time of the saves after each
run's first, which alone checks the sharding), else an estimate from the checkpoint's size and
:data:`WRITE_GBPS_PER_NODE`. The failure rate defaults to Llama 3's (``cluster.mtbf_hours`` sets it).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mtk.spec.job import Job

# Where the engine records each checkpoint save (relative to the run dir): plan/write/publish seconds.
SAVES_FILE = "state/checkpoint_saves.jsonl"

# Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", table 5): 419 unexpected interruptions in a 54-day
# snapshot of pre-training on 16,384 H100 GPUs (2,048 nodes of 8).
LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_NODES = 16384 // 8
DEFAULT_NODE_MTBF_HOURS = LLAMA3_DAYS * 24 * LLAMA3_NODES / LLAMA3_INTERRUPTIONS  # ≈ 6,335 h per node

# Estimates used where no run recorded a figure (each named where it is printed):
WRITE_GBPS_PER_NODE = 2.0  # sustained checkpoint write per node to FSx for Lustre / a parallel filesystem, GB/s
READ_GBPS_PER_NODE = 2.0   # the same for the load after a restart
ASSUMED_TFLOPS_PER_GPU = 400.0  # bf16 H100 at ~40 % MFU, for a step time when no run recorded one
BYTES_PER_PARAMETER_SAVED = 14  # bf16 weights (2) + fp32 master weights and Adam moments (12)
COORDINATION_S = 2.0  # a later save's plan, .metadata and publish at 1,024 nodes (benchmarks/scale_checkpoint.py)


@dataclass
class Restart:
    """Seconds of one restart, per phase, with where each figure comes from."""

    phases: dict[str, float]
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.phases.values())

    def describe(self) -> str:
        return " + ".join(f"{name} {_dur(s)}" for name, s in self.phases.items())


@dataclass
class SaveCost:
    seconds: float
    source: str


@dataclass
class Plan:
    """What validate/launch print: the job's MTBF, the restart, the save cost and the two goodputs."""

    nodes: int
    node_mtbf_h: float
    mtbf_source: str
    restart: Restart
    save: SaveCost
    step_s: float | None  # None: no run recorded one and there is no estimate (cpu)
    step_source: str
    interval_s: float  # Young/Daly
    configured_iterations: int | None

    @property
    def job_mtbf_s(self) -> float:
        return self.node_mtbf_h * 3600 / self.nodes

    def goodput(self, interval_s: float | None) -> float:
        return goodput(interval_s, self.save.seconds, self.restart.total, self.job_mtbf_s)

    @property
    def interval_iterations(self) -> int | None:
        return None if self.step_s is None else max(1, round(self.interval_s / self.step_s))

    def lines(self) -> list[str]:
        """The lines validate and launch print (stdout), the advice last."""
        best = self.goodput(self.interval_s)
        iters = self.interval_iterations
        every = f"{iters:,} iterations ≈ {_dur(self.interval_s)}" if iters else _dur(self.interval_s)
        step = f"step {self.step_s:.2f} s {self.step_source}" if self.step_s else self.step_source
        out = [
            f"failures:                every {_dur(self.job_mtbf_s)} at {self.nodes:,} node(s) (node MTBF "
            f"{self.node_mtbf_h:,.0f} h, {self.mtbf_source})",
            f"restart:                 {_dur(self.restart.total)} per failure ({self.restart.describe()})",
            f"checkpoint interval:     {every} (Young/Daly √(2 × save {self.save.seconds:.1f} s × MTBF "
            f"{_dur(self.job_mtbf_s)}); save cost {self.save.source}; {step})",
        ]
        n = self.configured_iterations
        if iters is None or self.step_s is None:
            out.append(f"goodput:                 {best:.1%} at that interval")
            return out
        if n is None:
            out.append(f"goodput:                 {best:.1%} at that interval; train.checkpoint.save_interval is not "
                       "set, so a failure loses the run back to its start: set it to "
                       f"{iters:,}")
            return out
        mine = self.goodput(n * self.step_s)
        lost = best - mine
        line = (f"goodput:                 {best:.1%} at that interval, {mine:.1%} at train.checkpoint.save_interval "
                f"{n:,}")
        ratio = n * self.step_s / self.interval_s
        if lost >= 0.005 or not 0.5 <= ratio <= 2:
            line += (f": {lost:.1%} of the run lost to {'saving too often' if ratio < 1 else 'lost work'} "
                     f"({ratio:.1f}× the interval); set it to {iters:,}")
        return [*out, line]


def goodput(interval_s: float | None, save_s: float, restart_s: float, mtbf_s: float) -> float:
    """Fraction of wall time that trains, first order (Young): saves cost δ/T, each failure R + T/2."""
    if interval_s is None or interval_s <= 0:
        return 0.0
    return max(0.0, 1 - save_s / interval_s - (interval_s / 2 + restart_s) / mtbf_s)


def young_daly(save_s: float, mtbf_s: float) -> float:
    """√(2 δ M), the first-order optimum (Young 1974; Daly 2006 adds higher-order terms that matter when δ ~ M)."""
    return math.sqrt(2 * save_s * mtbf_s)


def node_mtbf(job: Job) -> tuple[float, str]:
    set_h = getattr(job.cluster, "mtbf_hours", None)
    if set_h:
        return float(set_h), "cluster.mtbf_hours"
    return DEFAULT_NODE_MTBF_HOURS, (f"Llama 3: {LLAMA3_INTERRUPTIONS} interruptions in {LLAMA3_DAYS} days on "
                                     f"{LLAMA3_NODES * 8:,} GPUs; set cluster.mtbf_hours for your cluster")


def checkpoint_bytes(job: Job) -> float:
    from mtk.figures import parameter_counts

    total, _ = parameter_counts(job)
    return float(total) * BYTES_PER_PARAMETER_SAVED


def recorded(job: Job) -> tuple[list[float], list[float], str]:
    """(save seconds, step seconds, the newest run that recorded them) from the job's earlier runs.

    Runs are ``<runs_dir>/<name>-<stamp>`` (mtk.runs.new_run_dir): only those dirs are read, newest first, so a
    runs dir of thousands of runs costs one directory listing. Each run's first save is left out (it alone checks
    the sharding and starts the writer) unless it is the only one."""
    root = Path(job.cluster.runs_dir).expanduser()
    saves: list[float] = []
    steps: list[float] = []
    source = ""
    try:
        dirs = sorted((d for d in root.glob(f"{job.name}-*") if (d / SAVES_FILE).is_file()), reverse=True)
    except OSError:
        return [], [], ""
    for run_dir in dirs[:5]:
        if not _same_job(run_dir, job.name):
            continue
        times = [float(r["blocking_s"]) for r in _jsonl(run_dir / SAVES_FILE) if "blocking_s" in r]
        if not times:
            continue
        saves.extend(times[1:] or times)
        steps.extend(float(r["step_time_ms"]) / 1000 for r in _jsonl(run_dir / "metrics.jsonl")
                     if r.get("kind") == "train" and r.get("step_time_ms"))
        source = source or run_dir.name
    return saves, steps, source


def _same_job(run_dir: Path, name: str) -> bool:
    try:
        return json.loads((run_dir / "job.json").read_text()).get("name") == name
    except (OSError, ValueError, AttributeError):
        return False


def _jsonl(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash: the others still count
        if isinstance(rec, dict):
            out.append(rec)
    return out


def restart_path(job: Job, step_s: float) -> Restart:
    """The restart's phases. Measured where mtk measures them (the rendezvous: benchmarks/scale_rendezvous.py),
    on paper otherwise; sources in benchmarks/README.md "Goodput"."""
    nodes = job.cluster.nodes
    wd = job.resilience.watchdog
    detect = 3 * wd.interval + wd.min_timeout if wd.enabled else float(job.cluster.pg_timeout_s)
    load = checkpoint_bytes(job) / (nodes * READ_GBPS_PER_NODE * 1e9)
    phases = {
        "detect": detect,              # a hang: the watchdog's timeout; a crash is seen sooner
        "exit": 30.0,                  # mtk's stop grace: ranks end, the node step writes last_exit
        "requeue": 60.0,               # Slurm requeue / a PyTorchJob restart: one scheduler cycle + node prolog
        "image": 60.0,                 # container start on every node (enroot/pyxis import of a cached image)
        "rendezvous": 30.0 + 0.02 * nodes,  # estimate, inside issue 45's 60 s target (scale_rendezvous.py)
        "nccl_init": 10.0,             # on paper, see benchmarks/README.md (NVIDIA/nccl#1789)
        "load": max(load, 5.0),
        "first_step": 3 * step_s,      # data loader warm-up, allocator, first all-reduce
    }
    return Restart(phases)


def estimated_step_s(job: Job) -> float:
    from mtk.figures import parameter_counts

    _, active = parameter_counts(job)
    tokens = job.train.global_batch_size * job.model.seq_length
    return 6 * active * tokens / (job.cluster.world_size * ASSUMED_TFLOPS_PER_GPU * 1e12)


def plan(job: Job) -> Plan:
    """The checkpoint-interval advice for ``job`` at ``cluster.nodes``."""
    nodes = job.cluster.nodes
    saves, steps, source = recorded(job)
    if saves:
        save = SaveCost(statistics.median(saves), f"recorded by {source} (median of {len(saves)})")
    else:
        gb = checkpoint_bytes(job) / 1e9
        secs = gb / (nodes * WRITE_GBPS_PER_NODE)
        if job.train.checkpoint.async_save:
            secs /= 10  # async blocks for the copy to host memory only (~10× the write rate)
        save = SaveCost(secs + COORDINATION_S, f"estimated: {gb:,.0f} GB at {WRITE_GBPS_PER_NODE:g} GB/s per "
                        f"node{', async' if job.train.checkpoint.async_save else ''} + {COORDINATION_S:g} s "
                        "coordination")
    step_s: float | None
    if steps:
        step_s, step_source = max(statistics.median(steps), 1e-3), f"recorded by {source}"
    elif job.cluster.device == "gpu":
        step_s, step_source = estimated_step_s(job), f"estimated at {ASSUMED_TFLOPS_PER_GPU:g} TFLOP/s per GPU"
    else:
        step_s, step_source = None, "no step time yet: a run records one (metrics.jsonl) for the advice in iterations"
    mtbf_h, mtbf_source = node_mtbf(job)
    mtbf_s = mtbf_h * 3600 / nodes
    return Plan(nodes=nodes, node_mtbf_h=mtbf_h, mtbf_source=mtbf_source, restart=restart_path(job, step_s or 0.0),
                save=save, step_s=step_s, step_source=step_source,
                interval_s=young_daly(save.seconds, mtbf_s),
                configured_iterations=job.train.checkpoint.save_interval)


def advice_lines(job: Job) -> list[str]:
    """validate/launch's lines; never fails the command (advice only)."""
    try:
        return plan(job).lines()
    except Exception as exc:  # advice must not stop a launch
        return [f"checkpoint interval:     not computed ({type(exc).__name__}: {exc})"]


def _dur(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:,.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
