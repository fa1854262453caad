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

The first save of every attempt runs megatron-core's full sharding check (every rank's shard metadata to every
rank, rank 0 validating coverage): seconds at hundreds of nodes, tens at a thousand. With
``assume_constant_structure`` (the default) it runs once per attempt, so it is part of every restart; without it,
part of every save. Its cost is what the job's runs recorded for a first save at this many ranks, else
benchmarks/scale_checkpoint.py's measured law scaled to the job's ranks and tensors. An interval longer than the
run is no advice: then one save at the end suffices, and that is what is said.
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
# The first save's sharding check, measured by benchmarks/scale_checkpoint.py (benchmarks/README.md, "Checkpoint
# coordination"): every rank unpickling all ranks' metadata plus rank 0's validate_sharding_integrity, for a GPT of
# CHECK_TENSORS tensors per rank at 8 ranks per node — 0.16 / 0.64 / 1.81 / 3.32 s at 1 / 16 / 64 / 128 nodes, linear:
# CHECK_BASE_S + CHECK_S_PER_RANK_TENSOR x ranks x tensors per rank (25 s at 1,024 nodes). The all-gather's transfer
# (279 MB per rank at 1,024 nodes) is not in it.
CHECK_TENSORS = 12 * 32 + 3
CHECK_BASE_S = 0.15
CHECK_S_PER_RANK_TENSOR = (3.32 - 0.16) / (127 * 8 * CHECK_TENSORS)


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
    run_iterations: int | None = None  # train.iterations: no advice beyond the run
    save_on_exit: bool = True

    @property
    def job_mtbf_s(self) -> float:
        return self.node_mtbf_h * 3600 / self.nodes

    def goodput(self, interval_s: float | None) -> float:
        return goodput(interval_s, self.save.seconds, self.restart.total, self.job_mtbf_s)

    @property
    def interval_iterations(self) -> int | None:
        return None if self.step_s is None else max(1, round(self.interval_s / self.step_s))

    @property
    def one_save_suffices(self) -> bool:
        """The Young/Daly interval is at least the whole run: saving once, at the end, is the best there is."""
        iters = self.interval_iterations
        return iters is not None and self.run_iterations is not None and iters >= self.run_iterations

    def lines(self) -> list[str]:
        """The lines validate and launch print (stdout), the advice last."""
        iters = self.interval_iterations
        every = f"{iters:,} iterations ≈ {_dur(self.interval_s)}" if iters else _dur(self.interval_s)
        step = f"step {self.step_s:.2f} s {self.step_source}" if self.step_s else self.step_source
        young = f"Young/Daly √(2 × save {self.save.seconds:.1f} s × MTBF {_dur(self.job_mtbf_s)})"
        out = [
            f"failures:                every {_dur(self.job_mtbf_s)} at {self.nodes:,} node(s) (node MTBF "
            f"{self.node_mtbf_h:,.0f} h, {self.mtbf_source})",
            f"restart:                 {_dur(self.restart.total)} per failure ({self.restart.describe()})",
        ]
        if self.one_save_suffices and self.step_s is not None and self.run_iterations is not None:
            return out + self._one_save_lines(every, young, step)
        best = self.goodput(self.interval_s)
        out.append(f"checkpoint interval:     {every} ({young}; save cost {self.save.source}; {step})")
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

    def _one_save_lines(self, every: str, young: str, step: str) -> list[str]:
        """The advice when the run is shorter than the interval: never an interval longer than the run."""
        assert self.step_s is not None and self.run_iterations is not None
        run_s = self.run_iterations * self.step_s
        at_end = ("leave train.checkpoint.save_interval unset (save_on_exit saves at the end)" if self.save_on_exit
                  else f"set train.checkpoint.save_interval to {self.run_iterations:,} (save_on_exit is off)")
        out = [f"checkpoint interval:     one save at the end suffices: the run ({self.run_iterations:,} iterations "
               f"≈ {_dur(run_s)}) is shorter than the interval that balances saving against lost work ({every}, "
               f"{young}); save cost {self.save.source}; {step}"]
        end = self.goodput(run_s)
        n = self.configured_iterations
        if n is None or n >= self.run_iterations:
            saved = "saved at the end only" if self.save_on_exit or n else "no save at all"
            out.append(f"goodput:                 {end:.1%} with one save at the end (train.checkpoint.save_interval "
                       f"{'unset' if n is None else f'{n:,}'}: {saved})" + ("" if saved != "no save at all"
                                                                            else f"; {at_end}"))
            return out
        mine = self.goodput(n * self.step_s)
        line = (f"goodput:                 {end:.1%} with one save at the end, {mine:.1%} at "
                f"train.checkpoint.save_interval {n:,}")
        if end - mine >= 0.005:
            line += f": {end - mine:.1%} of the run lost to saving too often; {at_end}"
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


def tensors_per_rank(job: Job) -> int:
    """Sharded tensors one rank saves, as scale_checkpoint.py counts them for its GPT: 12 per layer of its
    pipeline stage (weights, biases, norms) + embedding, output layer and final norm."""
    return 12 * -(-job.model.num_layers // job.parallel.pp) + 3


def estimated_check_s(job: Job) -> float:
    """The first save's sharding check at the job's ranks and tensors, from scale_checkpoint.py's measured law."""
    return CHECK_BASE_S + CHECK_S_PER_RANK_TENSOR * job.cluster.world_size * tensors_per_rank(job)


def recorded_check(job: Job) -> tuple[float, str] | None:
    """What the job's runs recorded for the first save's check at this many ranks: a run's first (validated) save
    minus the median of its later ones, the median over the newest runs. None when no run recorded one."""
    root = Path(job.cluster.runs_dir).expanduser()
    try:
        dirs = sorted((d for d in root.glob(f"{job.name}-*") if (d / SAVES_FILE).is_file()), reverse=True)
    except OSError:
        return None
    extras, source = [], ""
    for run_dir in dirs[:5]:
        if not _same_job(run_dir, job.name):
            continue
        recs = [r for r in _jsonl(run_dir / SAVES_FILE) if "blocking_s" in r]
        if len(recs) < 2 or not recs[0].get("validated") or recs[0].get("ranks") != job.cluster.world_size:
            continue
        later = statistics.median(float(r["blocking_s"]) for r in recs[1:])
        extras.append(max(0.0, float(recs[0]["blocking_s"]) - later))
        source = source or run_dir.name
    if not extras:
        return None
    return statistics.median(extras), f"recorded by {source} (first save minus later ones, {len(extras)} run(s))"


def first_save_check(job: Job) -> tuple[float, str]:
    """Seconds of the first save's sharding check at the job's size, and where the figure comes from."""
    got = recorded_check(job)
    if got is not None:
        return got
    return estimated_check_s(job), (f"estimated: benchmarks/scale_checkpoint.py's law at {job.cluster.world_size:,} "
                                    f"ranks x {tensors_per_rank(job)} tensors")


def restart_path(job: Job, step_s: float) -> Restart:
    """The restart's phases. Measured where mtk measures them (the rendezvous: benchmarks/scale_rendezvous.py; the
    first save's sharding check: benchmarks/scale_checkpoint.py, or the job's own records), on paper otherwise;
    sources in benchmarks/README.md "Goodput"."""
    nodes = job.cluster.nodes
    wd = job.resilience.watchdog
    detect = 3 * wd.interval + wd.min_timeout if wd.enabled else float(job.cluster.pg_timeout_s)
    load = checkpoint_bytes(job) / (nodes * READ_GBPS_PER_NODE * 1e9)
    phases = {
        "detect": detect,              # a hang: the watchdog's timeout; a crash is seen sooner
        "exit": 30.0,                  # mtk's stop grace: ranks end, the node step writes last_exit
        "requeue": 60.0,               # Slurm requeue / a PyTorchJob restart: one scheduler cycle + node prolog
        "image": 60.0,                 # container start on every node (enroot/pyxis import of a cached image)
        # above the static rendezvous's 0.1 s derived at 1,024 nodes (scale_rendezvous.py), on purpose; c10d's, with
        # every pod starting at once, does not complete there (docs/scale.md)
        "rendezvous": 30.0 + 0.02 * nodes,
        "nccl_init": 10.0,             # on paper, see benchmarks/README.md (NVIDIA/nccl#1789)
        "load": max(load, 5.0),
        "first_step": 3 * step_s,      # data loader warm-up, allocator, first all-reduce
    }
    sources = {}
    if job.train.checkpoint.assume_constant_structure:  # checked once per attempt: on the restart's first save
        phases["first_save_check"], sources["first_save_check"] = first_save_check(job)
    return Restart(phases, sources)


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
        check = ""
        if not job.train.checkpoint.assume_constant_structure:  # every save re-checks the sharding
            secs += estimated_check_s(job)
            check = f" + {estimated_check_s(job):.1f} s sharding check (assume_constant_structure: false)"
        save = SaveCost(secs + COORDINATION_S, f"estimated: {gb:,.0f} GB at {WRITE_GBPS_PER_NODE:g} GB/s per "
                        f"node{', async' if job.train.checkpoint.async_save else ''} + {COORDINATION_S:g} s "
                        f"coordination{check}")
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
                configured_iterations=job.train.checkpoint.save_interval, run_iterations=job.train.iterations,
                save_on_exit=job.train.checkpoint.save_on_exit)


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
