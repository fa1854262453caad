"""Crash-safe ``dist_checkpointing`` (torch_dist) checkpoints with an atomically updated tracker.

Layout of the checkpoint dir (``train.checkpoint.dir`` or ``<run_dir>/checkpoints``)::

    iter_0000010/                     a published checkpoint (model, optimizer, scheduler, RNG, data position)
    iter_0000020.partial/             being written; never read; removed at the next start
    latest_checkpointed_iteration.txt the iteration to resume from (Megatron's tracker name and format)

Publishing order: every rank writes its shards into ``iter_N.partial`` → barrier → rank 0 renames it to
``iter_N`` → rank 0 replaces the tracker (temp file + ``os.replace``) → barrier. A crash at any point before
the tracker is replaced leaves the tracker naming the previous, complete checkpoint.

Distributed-optimizer state is saved in the ``dp_reshardable`` format (the only one that works without
Apex/TE on CPU), which reshards over data-parallel ranks only; the plain optimizer's state follows the
model's sharding and survives tp/pp changes.

Async save (``train.checkpoint.async_save``): the state dict is built synchronously, then megatron's
``mcore`` async strategy forks a writer process per save (fork = a copy-on-write snapshot of the tensors,
so training continues while the shards are written). ``poll()`` (every iteration, all ranks) finalizes a
finished save: megatron writes the checkpoint metadata, then rank 0 publishes exactly as above. At most
one save is in flight; saves before exiting (signal, trigger, end of run) are synchronous. The newer
default ``nvrx`` strategy needs nvidia-resiliency-ext, which is not used here.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from mtk.launcher.backends import atomic_write

from . import lease

TRACKER = "latest_checkpointed_iteration.txt"
PARTIAL_SUFFIX = ".partial"
_ITER_DIR = re.compile(r"^iter_(\d{7,})$")
DISTOPT_METADATA = {"distrib_optim_sharding_type": "dp_reshardable"}


def iter_dir_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def read_tracker(root: str | Path) -> int | None:
    """The published iteration, or None when there is no (readable) tracker."""
    path = Path(root) / TRACKER
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not text.isdigit():
        raise ValueError(f"{path} holds {text!r}, not an iteration number; fix or delete it")
    return int(text)


def published_iterations(root: str | Path) -> list[int]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := _ITER_DIR.match(p.name)))


def remove_partials(root: str | Path) -> list[Path]:
    """Delete ``*.partial`` dirs left by a crash during save. Rank 0 only, before anyone saves."""
    root = Path(root)
    removed = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and p.name.endswith(PARTIAL_SUFFIX):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def prune(root: str | Path, keep_last: int | None, protect: int | None) -> list[int]:
    """Remove all but the newest ``keep_last`` published checkpoints (never the tracked one)."""
    if not keep_last:
        return []
    iters = published_iterations(root)
    doomed = [i for i in iters[:-keep_last] if i != protect]
    for i in doomed:
        shutil.rmtree(Path(root) / iter_dir_name(i), ignore_errors=True)
    return doomed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(root: str | Path, iteration: int) -> Path:
    """Rename ``iter_N.partial`` to ``iter_N`` and point the tracker at it (rank 0, after all shards)."""
    root = Path(root)
    partial = root / (iter_dir_name(iteration) + PARTIAL_SUFFIX)
    final = root / iter_dir_name(iteration)
    if final.exists():  # a re-save of the same iteration (e.g. after a resume): replace it
        shutil.rmtree(final)
    os.replace(partial, final)
    _fsync_dir(root)
    atomic_write(root / TRACKER, f"{iteration}\n")
    _fsync_dir(root)
    return final


# --------------------------------------------------------------------------- state dicts


def _rng_state() -> dict[str, Any]:
    import random

    import numpy as np
    import torch
    from megatron.core import tensor_parallel

    state = {
        "random": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import random

    import numpy as np
    import torch
    from megatron.core import tensor_parallel

    random.setstate(state["random"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def topology(job) -> dict[str, int]:
    p = job.parallel
    return {"tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep, "world": job.cluster.world_size,
            "distributed_optimizer": int(p.distributed_optimizer)}


def _model_key(i: int, n: int) -> str:
    return "model" if n == 1 else f"model{i}"


def build_state_dict(model: list, optimizer, scheduler, common: dict[str, Any], is_loading: bool,
                     distributed_optimizer: bool) -> dict[str, Any]:
    """The sharded state dict: model chunks, optimizer, scheduler, per-rank RNG and plain common values."""
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    from megatron.core.utils import unwrap_model

    sd: dict[str, Any] = dict(common)
    for i, chunk in enumerate(unwrap_model(model)):
        sd[_model_key(i, len(model))] = chunk.sharded_state_dict()
    model_sd: dict[str, Any] = {}
    for i in range(len(model)):
        model_sd.update(sd[_model_key(i, len(model))])
    metadata = DISTOPT_METADATA if distributed_optimizer else None
    sd["optimizer"] = optimizer.sharded_state_dict(model_sd, is_loading=is_loading, metadata=metadata)
    sd["opt_param_scheduler"] = scheduler.state_dict()
    pp, tp = ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()
    sd["rng_state"] = ShardedObject(
        "rng_state", _rng_state(), (pp, tp), (ps.get_pipeline_model_parallel_rank(),
                                              ps.get_tensor_model_parallel_rank()),
        replica_id=ps.get_data_parallel_rank(with_context_parallel=True))
    return sd


def _keeps_per_param_step(inner) -> bool:
    """torch's Adam/AdamW keep ``step`` per parameter; TE's and Apex's FusedAdam keep it per param group
    only, and their ``state_dict()`` maps every per-param key through a dtype table (KeyError 'step')."""
    return type(inner).__module__.startswith("torch.optim")


def _prefill_adam_state(optimizer) -> None:
    """Give every inner Adam param an (exp_avg, exp_avg_sq) state, plus ``step`` where the optimizer keeps
    it per parameter, so loading has tensors to fill."""
    import torch

    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = opt.optimizer
        per_param_step = _keeps_per_param_step(inner)
        for group in inner.param_groups:
            for p in group["params"]:
                st = inner.state[p]
                if "exp_avg" not in st:
                    if per_param_step:
                        st["step"] = torch.tensor(0.0)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


def _restore_adam_steps(optimizer) -> None:
    """Give every Adam param its own, correct ``step`` tensor after a load.

    The distributed optimizer stores ``step`` once per param group; on load (no Apex/TE) it either assigns
    ONE shared tensor to all params — torch Adam increments it in place once per param, so training
    drifts — or leaves the pre-filled 0. Both break bias correction. The group's value is authoritative.
    """
    import torch

    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = opt.optimizer
        if not _keeps_per_param_step(inner):
            continue  # FusedAdam: the group's step is the only one, and megatron restored it
        for group in inner.param_groups:
            group_step = group.get("step")
            for p in group["params"]:
                st = inner.state.get(p)
                if not st or "step" not in st:
                    continue
                value = group_step if group_step is not None else st["step"]
                st["step"] = torch.tensor(float(value), dtype=torch.float32)


def _fork_results_queue() -> None:
    """megatron's torch_dist writer collects results through a Manager queue it creates with the *spawn*
    context on first save: a fresh interpreter that re-imports the main module (seconds per rank on a
    small machine). A fork-context manager is equivalent for the synchronous save and starts in ~50 ms."""
    import multiprocessing as mp
    from multiprocessing.managers import SyncManager

    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if getattr(filesystem_async, "_results_queue", None) is None:
        global _MANAGER
        _MANAGER = SyncManager(ctx=mp.get_context("fork"))
        _MANAGER.start(initializer=_die_with_parent)
        filesystem_async._results_queue = _MANAGER.Queue()


_MANAGER = None
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the manager process: end with the rank that started it, even when that rank is SIGKILLed
    (otherwise every killed rank leaves an orphaned manager behind)."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def check_compatible(path: Path, common: dict[str, Any], job) -> None:
    """Refuse, with the fix, the resumes whose optimizer state layout cannot match this job."""
    saved = common.get("topology", {})
    distopt = job.parallel.distributed_optimizer
    if "distributed_optimizer" in saved and bool(saved["distributed_optimizer"]) != distopt:
        raise RuntimeError(f"checkpoint {path} was saved with parallel.distributed_optimizer="
                           f"{bool(saved['distributed_optimizer'])}; resume with the same setting (the optimizer "
                           "state layouts differ) or point train.checkpoint.dir elsewhere to start fresh")
    if distopt and (saved.get("tp"), saved.get("pp")) != (job.parallel.tp, job.parallel.pp):
        raise RuntimeError(f"checkpoint {path} was saved with the distributed optimizer at tp={saved.get('tp')} "
                           f"pp={saved.get('pp')}; its dp_reshardable state loads only at the same tp/pp (the "
                           "data-parallel size may change); use those sizes or the plain optimizer")
    saved_fp32 = common.get("precision", job.train.precision) == "fp32"
    if saved_fp32 != (job.train.precision == "fp32"):
        raise RuntimeError(f"checkpoint {path} was saved with train.precision={common.get('precision')}; "
                           f"resuming at {job.train.precision} changes the optimizer state layout (fp32 master "
                           "weights); keep the precision family (bf16/fp16/fp8 vs fp32)")


class CheckpointManager:
    """Save/load for one run. All ranks call every method (they contain collectives)."""

    def __init__(self, root: str | Path, keep_last: int | None = None, log=print, async_save: bool = False,
                 owner: str | Path | None = None):
        self.root = Path(root)
        self.owner = str(owner or root)  # the run dir that writes here, named to a second writer (lease)
        self.keep_last = keep_last
        self.log = log
        self.async_save = async_save
        self._queue = None  # megatron AsyncCallsQueue, created on the first async save
        self.in_flight: int | None = None

    # every rank
    def prepare(self) -> None:
        """Create the dir and remove partial saves left by a crash (rank 0), then sync."""
        import torch.distributed as dist

        if dist.get_rank() == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            lease.acquire(self.root, self.owner)  # before touching partials: they may be another run's save
            for p in remove_partials(self.root):
                self.log(f"[checkpoint] removed partial save {p} left by an interrupted run")
        dist.barrier()

    def latest(self) -> int | None:
        return read_tracker(self.root)

    def save(self, iteration: int, model: list, optimizer, scheduler, common: dict[str, Any],
             distributed_optimizer: bool, blocking: bool = True) -> Path:
        """Write and publish ``iter_N``. With ``async_save`` and ``blocking=False`` only schedule the write;
        ``poll()``/``wait()`` publish it once every rank has finished."""
        import torch.distributed as dist
        from megatron.core import dist_checkpointing

        self.wait()  # one save in flight at most, and never two writers on one partial dir
        _fork_results_queue()
        partial = self.root / (iter_dir_name(iteration) + PARTIAL_SUFFIX)
        if dist.get_rank() == 0:
            if partial.exists():
                shutil.rmtree(partial)
            partial.mkdir(parents=True)
        dist.barrier()
        sd = build_state_dict(model, optimizer, scheduler, {**common, "iteration": iteration},
                              is_loading=False, distributed_optimizer=distributed_optimizer)
        metadata = DISTOPT_METADATA if distributed_optimizer else None
        if self.async_save and not blocking:
            from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

            request = dist_checkpointing.save(sd, str(partial), content_metadata=metadata,
                                              async_sharded_save=True, async_strategy="mcore")
            request.add_finalize_fn(lambda: self._publish_rank0(iteration))
            if self._queue is None:
                self._queue = AsyncCallsQueue()
            self._queue.schedule_async_request(request)
            self.in_flight = iteration
            return self.root / iter_dir_name(iteration)
        dist_checkpointing.save(sd, str(partial), content_metadata=metadata)
        dist.barrier()
        self._publish_rank0(iteration)
        dist.barrier()
        return self.root / iter_dir_name(iteration)

    def _publish_rank0(self, iteration: int) -> None:
        import torch.distributed as dist

        if dist.get_rank() != 0:
            return
        publish(self.root, iteration)
        if self.async_save:
            self.log(f"[checkpoint] published iteration {iteration} (async write finished)")
        for i in prune(self.root, self.keep_last, protect=iteration):
            self.log(f"[checkpoint] removed old checkpoint iteration {i} (keep_last={self.keep_last})")

    def poll(self) -> None:
        """Publish a finished async save (collective: call on every rank, every iteration)."""
        if (self._queue is not None and self.in_flight is not None
                and self._queue.maybe_finalize_async_calls(blocking=False)):
            self.in_flight = None

    def wait(self) -> None:
        """Block until an in-flight async save is written and published (collective)."""
        if self._queue is not None and self.in_flight is not None:
            self._queue.maybe_finalize_async_calls(blocking=True)
            self.in_flight = None

    def load(self, model: list, optimizer, scheduler, job) -> dict[str, Any] | None:
        """Restore from the tracked iteration; returns the common values (iteration, consumed samples)."""
        import torch
        from megatron.core import dist_checkpointing

        iteration = self.latest()
        if iteration is None:
            return None
        path = self.root / iter_dir_name(iteration)
        if not path.is_dir():
            raise FileNotFoundError(f"{self.root / TRACKER} names iteration {iteration} but {path} is missing; "
                                    f"restore it or delete the tracker to start from scratch")
        common = dist_checkpointing.load_common_state_dict(str(path))
        saved_topo = common.get("topology", {})
        same_topology = saved_topo == topology(job)
        distopt = job.parallel.distributed_optimizer
        check_compatible(path, common, job)
        if distopt:
            _prefill_adam_state(optimizer)
        sd = build_state_dict(model, optimizer, scheduler, {}, is_loading=True, distributed_optimizer=distopt)
        if not same_topology:
            sd.pop("rng_state")  # RNG streams are per (pp, tp) rank: meaningless after a topology change
        with torch.no_grad():
            loaded = dist_checkpointing.load(sd, str(path))
        from megatron.core.utils import unwrap_model

        for i, chunk in enumerate(unwrap_model(model)):
            chunk.load_state_dict(loaded[_model_key(i, len(model))], strict=True)
        with torch.no_grad():
            optimizer.load_state_dict(loaded["optimizer"])
        _restore_adam_steps(optimizer)
        scheduler.load_state_dict(loaded["opt_param_scheduler"])
        if same_topology:
            _set_rng_state(loaded["rng_state"])
        else:
            self.log(f"[checkpoint] topology changed {saved_topo} -> {topology(job)}: RNG state not restored")
        return {k: loaded[k] for k in ("iteration", "consumed_samples") if k in loaded} | {"path": str(path)}
