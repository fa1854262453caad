"""Crash-safe ``dist_checkpointing`` (torch_dist) checkpoints: the async writer, the manager and loading.

The layout and the publishing order are in :mod:`mtk.training.checkpoint_layout`; the state dict in
:mod:`mtk.training.checkpoint_state`; optimizer-state workarounds in :mod:`mtk.training.optimizer_state`;
``train.init_from`` in :mod:`mtk.training.init_from`.

Distributed-optimizer state is saved as Megatron-LM saves it by default, ``dp_reshardable`` (each rank's
flat buffers; reshards over data-parallel ranks only), or with ``train.checkpoint.fully_reshardable`` in its
``fully_reshardable`` layout (one tensor per parameter, gathered over data-parallel ranks on save). The plain
optimizer's state follows the model's sharding. Which resumes at another tp/pp/dp load is decided from the
common state by :mod:`mtk.training.reshard`, before anything is loaded.

Async save (``train.checkpoint.async_save``): the state dict is built synchronously, then megatron's
``mcore`` async strategy forks a writer process per save (fork = a copy-on-write snapshot of the tensors,
so training continues while the shards are written). ``poll()`` (every iteration, all ranks) finalizes a
finished save: megatron writes the checkpoint metadata, then rank 0 publishes exactly as above. At most
one save is in flight; saves before exiting (signal, trigger, end of run) are synchronous. The newer
default ``nvrx`` strategy needs nvidia-resiliency-ext, which is not used here.

Save coordination at scale (``train.checkpoint.assume_constant_structure``, on by default; issue 45): one
save strategy lives for the whole run, so megatron-core's cached plans survive from save to save, and the
sharding-integrity check (an ``all_gather_object`` of every rank's shard metadata to every rank: N² bytes
in total, minutes at thousands of ranks) runs on the first save only. The state dict can still change between
saves (Adam's state appears at the first optimizer step that is not skipped), and megatron-core never compares
the plans it reuses with it: before each reuse every rank compares its state dict's structure with the one the
plans were made from and the ranks agree in one all-reduce (:mod:`mtk.training.save_structure`); a change makes a
new strategy, so that save is planned and its sharding checked anew, and says so in one log line.
``benchmarks/scale_checkpoint.py`` measures all three. Each save's phases (plan: the check and the state dict to
write plan; write; publish) are timed and rank 0 appends them to ``<run dir>/state/checkpoint_saves.jsonl``
(:data:`mtk.goodput.SAVES_FILE`), the save cost ``mtk validate`` turns into a checkpoint interval.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

from mtk.batch_schedule import BatchSchedule
from mtk.files import atomic_write, open_append

from . import lease
from .checkpoint_layout import (  # noqa: F401  (re-exported: the layout's names as checkpoint.X)
    PARTIAL_SUFFIX,
    RELEASE,
    TRACKER,
    iter_dir_name,
    prune,
    publish,
    published_iterations,
    read_tracker,
    read_tracker_entry,
    remove_partials,
    resolve_checkpoint_dir,
    tracked_checkpoint,
)
from .checkpoint_state import build_state_dict, common_state, model_key, topology  # noqa: F401
from .optimizer_state import (
    MODEL_SPACE_LOADERS,
    fused_adam,
    load_model_space_distopt,
    prefill_adam_state,
    restore_adam_steps,
)
from .save_structure import StructureCheck


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


def check_compatible(path: Path, common: dict[str, Any], job, optimizer_state: bool = True,
                     vocab_size: int | None = None):
    """Refuse, naming the spec field and the fix, a resume megatron-core cannot load at this job's layout;
    return the reshard plan (what changes, whether RNG is restored). Rules: :mod:`mtk.training.reshard`.
    ``vocab_size``: the vocabulary this job's model is built with (its tokenizer's)."""
    from . import reshard

    return reshard.plan(common, job, f"checkpoint {path}", optimizer_state=optimizer_state, vocab_size=vocab_size)


def has_optimizer_state(common: dict[str, Any], release: bool) -> bool:
    """Megatron-LM writes no optimizer/scheduler state for ``release`` checkpoints or with --no-save-optim."""
    args = common.get("args")
    return not release and not (args is not None and getattr(args, "no_save_optim", False))


def load_weights(model: list, optimizer, path: Path, metadata: dict[str, Any] | None) -> None:
    """Load only the model weights of a torch_dist checkpoint (any TP/PP layout: the tensors reshard), then
    refresh the optimizer's fp32 main copies of them."""
    import torch
    from megatron.core import dist_checkpointing
    from megatron.core.utils import unwrap_model

    sd = build_state_dict(model, None, None, {}, is_loading=True, metadata=metadata, rng=False, rerun=False)
    for i in range(len(model)):  # module extra state (TE fp8 scaling history) restarts, as for a new run
        part = sd[model_key(i, len(model))]
        for key in [k for k in part if k.endswith("_extra_state")]:
            del part[key]
    with torch.no_grad():
        loaded = dist_checkpointing.load(sd, str(path))
    for i, chunk in enumerate(unwrap_model(model)):
        result = chunk.load_state_dict(loaded[model_key(i, len(model))], strict=False)
        missing = [k for k in result.missing_keys if not k.endswith("_extra_state")]
        if missing or result.unexpected_keys:
            raise RuntimeError(f"checkpoint {path} does not fit the model: missing {missing}, "
                               f"unexpected {result.unexpected_keys}")
    if optimizer is not None:
        optimizer.reload_model_params()


class CheckpointManager:
    """Save/load for one run. All ranks call every method (they contain collectives)."""

    def __init__(self, root: str | Path, keep_last: int | None = None, log=print, async_save: bool = False,
                 owner: str | Path | None = None, assume_constant_structure: bool = True,
                 fully_parallel: bool = False):
        self.root = Path(root)
        self.owner = str(owner or root)  # the run dir that writes here, named to a second writer (lease)
        self.run_dir = Path(owner) if owner is not None else None  # where the save times are recorded
        self.keep_last = keep_last
        self.log = log
        self.async_save = async_save
        self.assume_constant_structure = assume_constant_structure
        self.fully_parallel = fully_parallel
        self._queue: Any = None  # megatron AsyncCallsQueue, created on the first async save
        self.in_flight: int | None = None
        self._side_files: dict[int, dict[str, str]] = {}
        self._strategy: Any = None  # one save strategy for the run: its cached plans outlive a save
        self._structure = StructureCheck()  # what the cached plans were made from, checked before each reuse
        self.saves = 0  # saves planned by this manager (the first one, and one whose structure changed, validate)
        self.timings: dict[int, dict[str, Any]] = {}  # iteration -> phase seconds, until recorded

    # every rank
    def prepare(self) -> None:
        """Create the dir and remove partial saves left by a crash (rank 0), then sync."""
        import torch
        import torch.distributed as dist

        refused = None
        if dist.get_rank() == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            try:
                lease.acquire(self.root, self.owner)  # before touching partials: they may be another run's save
            except lease.LeaseHeld as exc:
                refused = exc
            else:
                for p in remove_partials(self.root):
                    self.log(f"[checkpoint] removed partial save {p} left by an interrupted run")
        # rank 0's verdict reaches every rank, so all stop together (none is left in a collective)
        flag = torch.tensor([1.0 if refused else 0.0], device=torch.cuda.current_device())
        dist.all_reduce(flag)
        if refused is not None:
            raise refused
        if flag.item():
            raise lease.LeaseHeld(f"checkpoint dir {self.root}: rank 0 was refused its lease (its line says why)")

    def latest(self) -> int | None:
        return read_tracker(self.root)

    def save(self, iteration: int, model: list, optimizer, scheduler, common: dict[str, Any],
             distributed_optimizer: bool, blocking: bool = True, side_files: dict[str, str] | None = None) -> Path:
        """Write and publish ``iter_N``. With ``async_save`` and ``blocking=False`` only schedule the write;
        ``poll()``/``wait()`` publish it once every rank has finished. ``side_files`` (name → text) land in
        ``iter_N`` with it (written into the partial dir, so they appear with the checkpoint or not at all)."""
        self._side_files[iteration] = dict(side_files or {})
        self.begin(iteration)
        from .interop import megatron_lm

        # As Megatron-LM's _build_sharded_state_dict_metadata: the layout follows the args the checkpoint records.
        fully = bool(getattr(common.get("args"), "dist_ckpt_optim_fully_reshardable", False))
        metadata = megatron_lm.content_metadata(distributed_optimizer, fully_reshardable=fully)
        sd = build_state_dict(model, optimizer, scheduler, {**common, "iteration": iteration},
                              is_loading=False, metadata=metadata)
        return self.save_sharded(iteration, sd, metadata, blocking=blocking)

    def begin(self, iteration: int) -> None:
        """Finish any save in flight (one at most, never two writers on one partial dir), then make ``iter_N``'s
        empty partial dir (rank 0; 0700 until published) and sync."""
        import torch.distributed as dist

        self.wait()
        _fork_results_queue()
        partial = self.root / (iter_dir_name(iteration) + PARTIAL_SUFFIX)
        if dist.get_rank() == 0:
            if partial.is_symlink() or partial.is_file():
                partial.unlink()
            elif partial.exists():
                shutil.rmtree(partial)
            self.root.mkdir(parents=True, exist_ok=True)
            # Private until published (checkpoint_layout.publish opens it): megatron-core writes its shards and
            # .metadata by path, so a link another user planted in it (a shared checkpoint dir) would redirect them.
            partial.mkdir(mode=0o700)
        dist.barrier()

    def strategy(self) -> Any:
        """The run's torch_dist save strategy (made once: with ``assume_constant_structure`` megatron-core keeps
        the previous save's local and central plans in it and skips the global plan once they repeat)."""
        if self._strategy is None:
            from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

            self._strategy = TorchDistSaveShardedStrategy("torch_dist", 1,
                                                          cached_metadata=self.assume_constant_structure)
            if self.fully_parallel:  # replicated shards written by every data-parallel rank, not only the first
                from megatron.core import parallel_state
                from megatron.core.dist_checkpointing.strategies.fully_parallel import (
                    FullyParallelSaveStrategyWrapper,
                )

                group = (parallel_state.get_data_parallel_group(with_context_parallel=True)
                         if parallel_state.model_parallel_is_initialized() else None)  # None: every rank
                self._strategy = FullyParallelSaveStrategyWrapper(
                    self._strategy, group, do_cache_distribution=self.assume_constant_structure)
        return self._strategy

    def save_sharded(self, iteration: int, sd: dict[str, Any], metadata: dict[str, Any] | None,
                     blocking: bool = True) -> Path:
        """Plan, write and publish a built sharded state dict into ``iter_N`` (its partial dir exists on every
        rank's view); the phases are timed into :attr:`timings` and recorded on rank 0 once published."""
        import torch.distributed as dist
        from megatron.core import dist_checkpointing

        partial = self.root / (iter_dir_name(iteration) + PARTIAL_SUFFIX)
        validate = self.saves == 0 or not self.assume_constant_structure
        t0 = time.perf_counter()
        changed = self._structure_changed(iteration, sd) if self.assume_constant_structure else None
        if changed is not None:  # every rank: a plan is global
            self._strategy = None
            validate = True
        strategy = self.strategy()
        cached_plan = bool(getattr(getattr(strategy, "base_strategy", strategy), "validated_cache_reuse", False))
        checked = time.perf_counter()
        request = dist_checkpointing.save(sd, str(partial), strategy, validate_access_integrity=validate,
                                          content_metadata=metadata, async_sharded_save=True,
                                          async_strategy="mcore")
        self.saves += 1
        timing: dict[str, Any] = {"iteration": iteration, "plan_s": time.perf_counter() - t0, "check_s": checked - t0,
                                  "validated": validate, "structure_changed": changed is not None,
                                  "cached_plan": cached_plan, "ranks": dist.get_world_size()}
        self.timings[iteration] = timing
        if self.async_save and not blocking:
            from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

            timing.update(mode="async", blocking_s=timing["plan_s"], scheduled=time.time())
            request.add_finalize_fn(lambda: self._publish_rank0(iteration))
            if self._queue is None:
                self._queue = AsyncCallsQueue()
            self._queue.schedule_async_request(request)
            self.in_flight = iteration
            return self.root / iter_dir_name(iteration)
        t1 = time.perf_counter()
        request.execute_sync()  # the shards, then megatron's finalize (gather write results, .metadata)
        dist.barrier()
        t2 = time.perf_counter()
        self._publish_rank0(iteration)
        dist.barrier()
        t3 = time.perf_counter()
        timing.update(mode="sync", write_s=t2 - t1, publish_s=t3 - t2, blocking_s=t3 - t0)
        self._record(iteration)
        return self.root / iter_dir_name(iteration)

    def _structure_changed(self, iteration: int, sd: dict[str, Any]) -> str | None:
        """Whether the cached save plans no longer fit ``sd`` on some rank (:mod:`.save_structure`; one
        all-reduce once plans are cached); said in one log line. Applies the state dict's factories first, as the
        save would: what they build is what the plans describe."""
        from megatron.core.dist_checkpointing.mapping import apply_factories

        apply_factories(sd)
        changed = self._structure.changed(sd)
        if changed is not None:
            self.log(f"[checkpoint] iteration {iteration}: {changed}: planning this save anew and checking its "
                     "sharding again")
        return changed

    def _record(self, iteration: int) -> None:
        """Rank 0 appends the save's timing to the run's saves file (one line per save, one append)."""
        import torch.distributed as dist

        timing = self.timings.pop(iteration, None)
        if timing is None or self.run_dir is None or dist.get_rank() != 0:
            return
        from mtk.goodput import SAVES_FILE

        if "scheduled" in timing:  # async: the write ran in the background until now
            timing["write_s"] = time.time() - timing.pop("scheduled")
        timing["time"] = time.time()
        path = self.run_dir / SAVES_FILE
        with contextlib.suppress(OSError):  # a missing record costs only advice, never the save
            path.parent.mkdir(parents=True, exist_ok=True)
            with open_append(path) as fh:
                fh.write(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                     for k, v in timing.items()}) + "\n")

    def _publish_rank0(self, iteration: int) -> None:
        import torch.distributed as dist

        side_files = self._side_files.pop(iteration, {})
        if dist.get_rank() != 0:
            self.timings.pop(iteration, None)
            return
        partial = self.root / (iter_dir_name(iteration) + PARTIAL_SUFFIX)
        for name, text in side_files.items():
            atomic_write(partial / name, text)
        publish(self.root, iteration)
        if self.timings.get(iteration, {}).get("mode") == "async":
            self._record(iteration)
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

    def load(self, model: list, optimizer, scheduler, job, vocab_size: int) -> dict[str, Any] | None:
        """Restore from the tracked checkpoint (mtk's or Megatron-LM's); returns iteration, consumed samples
        and path, or None when there is nothing to resume. ``vocab_size``: the one the model was built with."""
        found = tracked_checkpoint(self.root)
        if found is None:
            return None
        return load_checkpoint(found, model, optimizer, scheduler, job, vocab_size, self.log)


def load_checkpoint(found: tuple[Path, int, bool], model: list, optimizer, scheduler, job, vocab_size: int,
                    log=print) -> dict[str, Any]:
    """Resume from one checkpoint dir: weights, optimizer, scheduler, RNG and data position where it has them.

    Reads what Megatron-LM's loader reads: ``args.consumed_train_samples`` for the data position, the
    ``content_metadata`` for how the optimizer keys were written, the ``release`` convention (weights only,
    iteration 0)."""
    import torch
    from megatron.core import dist_checkpointing
    from megatron.core.utils import unwrap_model

    from . import lr_resume
    from .interop import megatron_lm

    path, iteration, release = found
    common = dist_checkpointing.load_common_state_dict(str(path))
    iteration = 0 if release else int(common.get("iteration", iteration))
    consumed = 0 if release else megatron_lm.consumed_samples(common)
    with_optimizer = has_optimizer_state(common, release)
    plan = check_compatible(path, common, job, optimizer_state=with_optimizer, vocab_size=vocab_size)
    for note in plan.notes:
        log(f"[checkpoint] {note}")
    if plan.resharding:
        log(f"[checkpoint] {plan.describe()}")
    saved_meta = dist_checkpointing.load_content_metadata(preloaded_state_dict=common)
    if not with_optimizer:
        load_weights(model, optimizer, path, saved_meta)
        if consumed:
            scheduler.step(increment=consumed)
        why = "a release checkpoint" if release else "the checkpoint has no optimizer state"
        log(f"[checkpoint] loaded weights from {path} ({why}): optimizer moments start at zero"
            + ("" if release else f", schedule and data position continue at iteration {iteration}"))
        return {"iteration": iteration, "consumed_samples": consumed, "path": str(path)}
    if job.parallel.distributed_optimizer:
        prefill_adam_state(optimizer)
    sd = build_state_dict(model, optimizer, scheduler, {}, is_loading=True, metadata=saved_meta, rerun=False)
    if not plan.restore_rng:
        sd.pop("rng_state")  # RNG streams are per (pp, tp) rank: meaningless after a tp/pp change
    with torch.no_grad():
        loaded = dist_checkpointing.load(sd, str(path))
    for i, chunk in enumerate(unwrap_model(model)):
        chunk.load_state_dict(loaded[model_key(i, len(model))], strict=True)
    with torch.no_grad():
        if plan.distopt_sharding in MODEL_SPACE_LOADERS and not fused_adam(optimizer):
            load_model_space_distopt(optimizer, loaded["optimizer"])
        else:
            optimizer.load_state_dict(loaded["optimizer"])
    restore_adam_steps(optimizer)
    batches = BatchSchedule.of(job)
    spec_schedule = lr_resume.of_scheduler(scheduler, batches)  # before load_state_dict: "keep" overwrites it
    scheduler.load_state_dict(loaded["opt_param_scheduler"])
    line = lr_resume.resume_line(scheduler, spec_schedule, loaded["opt_param_scheduler"], batches,
                                 job.train.lr_schedule_on_resume)
    if line:
        log(line)
    if plan.restore_rng and "rng_state" in loaded:
        megatron_lm.set_rng_state(loaded["rng_state"])
    return {"iteration": iteration, "consumed_samples": consumed, "path": str(path)}




def check_same_model(path: Path, common: dict[str, Any], job, padded_vocab_size: int, field: str) -> None:
    """Refuse, naming the field, a checkpoint whose model shape differs from ``job.model``."""
    from .reshard import shape_mismatch

    args = common.get("args")
    if args is None:
        return
    if mismatch := shape_mismatch(args, job.model):
        arg, attr, saved, ours = mismatch
        raise RuntimeError(f"{field}: checkpoint {path} has {arg}={saved} but this job has model.{attr}={ours}; "
                           "set the model to the checkpoint's shape")
    saved_vocab = getattr(args, "padded_vocab_size", None)
    if saved_vocab is not None and saved_vocab != padded_vocab_size:
        raise RuntimeError(f"{field}: checkpoint {path} has a padded vocabulary of {saved_vocab} rows but this job "
                           f"pads to {padded_vocab_size} (its tokenizer's vocabulary — model.vocab_size for mock "
                           "data — padded to model.make_vocab_size_divisible_by × parallel.tp); use the tokenizer "
                           "the checkpoint was trained with, and make the padding agree")
