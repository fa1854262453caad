"""Crash-safe ``dist_checkpointing`` (torch_dist) checkpoints with an atomically updated tracker.

Layout of the checkpoint dir (``train.checkpoint.dir`` or ``<run_dir>/checkpoints``)::

    iter_0000010/                     a published checkpoint (model, optimizer, scheduler, RNG, data position)
    iter_0000020.partial/             being written; never read; removed at the next start
    latest_checkpointed_iteration.txt the iteration to resume from (Megatron's tracker name and format)

Publishing order: every rank writes its shards into ``iter_N.partial`` → barrier → rank 0 renames it to
``iter_N`` → rank 0 replaces the tracker (temp file + ``os.replace``) → barrier. A crash at any point before
the tracker is replaced leaves the tracker naming the previous, complete checkpoint.

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
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from mtk.files import atomic_write

from . import lease

TRACKER = "latest_checkpointed_iteration.txt"
PARTIAL_SUFFIX = ".partial"
_ITER_DIR = re.compile(r"^iter_(\d{7,})$")


def iter_dir_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


RELEASE = "release"


def read_tracker_entry(root: str | Path) -> str | None:
    """The tracker's content: an iteration number, ``release`` (Megatron-LM's weights-only checkpoints in
    ``<root>/release``), or None when there is no tracker."""
    path = Path(root) / TRACKER
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not text.isdigit() and text != RELEASE:
        raise ValueError(f"{path} holds {text!r}, not an iteration number or 'release'; fix or delete it")
    return text


def read_tracker(root: str | Path) -> int | None:
    """The published iteration (0 for a ``release`` checkpoint), or None when there is no tracker."""
    entry = read_tracker_entry(root)
    if entry is None:
        return None
    return 0 if entry == RELEASE else int(entry)


def tracked_checkpoint(root: str | Path) -> tuple[Path, int, bool] | None:
    """(directory, iteration, is_release) of the checkpoint the tracker names, or None without a tracker."""
    root = Path(root)
    entry = read_tracker_entry(root)
    if entry is None:
        return None
    if entry == RELEASE:
        path, iteration, release = root / RELEASE, 0, True
    else:
        path, iteration, release = root / iter_dir_name(int(entry)), int(entry), False
    if not path.is_dir():
        raise FileNotFoundError(f"{root / TRACKER} names {entry} but {path} is missing; restore it or delete "
                                f"the tracker to start from scratch")
    return path, iteration, release


def resolve_checkpoint_dir(path: str | Path) -> tuple[Path, int, bool]:
    """A checkpoint given by the user: a root with a tracker, or one ``iter_N``/``release`` dir itself."""
    path = Path(path)
    found = tracked_checkpoint(path)
    if found is not None:
        return found
    if (path / "metadata.json").is_file():
        m = _ITER_DIR.match(path.name)
        return path, int(m.group(1)) if m else 0, path.name == RELEASE
    raise FileNotFoundError(f"{path} is neither a checkpoint directory with {TRACKER} nor a torch_dist "
                            f"checkpoint (iter_N/ or release/ with metadata.json)")


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


def topology(job) -> dict[str, int]:
    p = job.parallel
    return {"tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep, "world": job.cluster.world_size,
            "distributed_optimizer": int(p.distributed_optimizer)}


def common_state(job, *, iteration: int, consumed_samples: int, data_parallel_size: int, vocab_size: int,
                 padded_vocab_size: int, flops_so_far: float,
                 tokenizer: dict[str, Any] | None = None) -> dict[str, Any]:
    """The non-tensor part of a checkpoint: Megatron-LM's fields, plus mtk's own under ``mtk``.
    ``vocab_size``: the vocabulary the model was built with (the tokenizer's), not ``model.vocab_size``;
    ``tokenizer``: the record of :mod:`interop.hf_tokenizer`, which export and init_from carry on."""
    from .interop import megatron_lm

    args = megatron_lm.megatron_args(job, data_parallel_size=data_parallel_size, vocab_size=vocab_size,
                                     padded_vocab_size=padded_vocab_size,
                                     consumed_train_samples=consumed_samples, iteration=iteration)
    return {
        "args": args,
        "checkpoint_version": megatron_lm.CHECKPOINT_VERSION,
        "iteration": iteration,
        "num_floating_point_operations_so_far": float(flops_so_far),
        megatron_lm.MTK_KEY: {"topology": topology(job), "precision": job.train.precision,
                              "job_name": job.name, **({"tokenizer": tokenizer} if tokenizer else {})},
    }


def _model_key(i: int, n: int) -> str:
    return "model" if n == 1 else f"model{i}"


def build_state_dict(model: list, optimizer, scheduler, common: dict[str, Any], is_loading: bool,
                     metadata: dict[str, Any] | None, rng: bool = True, rerun: bool = True) -> dict[str, Any]:
    """The sharded state dict, laid out as Megatron-LM's ``generate_state_dict``: model chunks, optimizer,
    scheduler, per-rank RNG (its list-of-dicts format), rerun state and the plain common values.

    ``metadata`` is the content metadata (sharded-state-dict options) the optimizer keys are built with;
    ``optimizer=None`` builds the model part only (weights-only loads)."""
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    from megatron.core.utils import unwrap_model

    from .interop import megatron_lm

    runtime = megatron_lm.runtime_metadata(metadata)
    sd: dict[str, Any] = dict(common)
    for i, chunk in enumerate(unwrap_model(model)):
        sd[_model_key(i, len(model))] = chunk.sharded_state_dict(metadata=runtime)
    if optimizer is not None:
        model_sd: dict[str, Any] = {}
        for i in range(len(model)):
            model_sd.update(sd[_model_key(i, len(model))])
        sd["optimizer"] = optimizer.sharded_state_dict(model_sd, is_loading=is_loading, metadata=runtime)
        sd["opt_param_scheduler"] = scheduler.state_dict()
    if rng:
        pp, tp = ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()
        sd["rng_state"] = ShardedObject(
            "rng_state", megatron_lm.rng_state_list(), (pp, tp),
            (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
            replica_id=ps.get_data_parallel_rank(with_context_parallel=True))
    if rerun and (state := megatron_lm.rerun_state()) is not None:
        sd["rerun_state_machine"] = state
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


_MODEL_SPACE_LOADERS = {"fully_reshardable": "load_parameter_state_from_fully_reshardable",
                        "fully_sharded_model_space": "load_parameter_state_from_fs_model_space"}


def _fused_adam(optimizer) -> bool:
    return not any(_keeps_per_param_step(o.optimizer) for o in getattr(optimizer, "chained_optimizers", [optimizer]))


def _load_model_space_distopt(optimizer, state: Any) -> None:
    """Load a model-space (``fully_reshardable``) distributed-optimizer state with torch's Adam (no Apex/TE).

    megatron-core's ``DistributedOptimizer.load_state_dict`` gives every param a ``step`` tensor (torch Adam
    needs one), then copies each tensor of a param's state from the checkpoint, which keeps ``step`` per
    param group only: KeyError 'step'. So the param groups/scaler load first, the per-param ``step`` goes,
    the parameter state loads, and :func:`_restore_adam_steps` puts ``step`` back from the group."""
    opts = getattr(optimizer, "chained_optimizers", [optimizer])
    if len(opts) == 1:
        parts = [state]
    else:
        parts = [v for _, v in sorted(state.items())] if isinstance(state, dict) else list(state)
    for opt, part in zip(opts, parts, strict=True):
        part = dict(part)
        param_state = part.pop("param_state")
        loader = _MODEL_SPACE_LOADERS[part.pop("param_state_sharding_type")]
        opt.load_state_dict(part)
        for st in opt.optimizer.state.values():
            st.pop("step", None)
        getattr(opt, loader)(param_state)
    if len(opts) > 1:
        optimizer._synchronize_steps()


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
                if not st or ("step" not in st and group_step is None):
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
        part = sd[_model_key(i, len(model))]
        for key in [k for k in part if k.endswith("_extra_state")]:
            del part[key]
    with torch.no_grad():
        loaded = dist_checkpointing.load(sd, str(path))
    for i, chunk in enumerate(unwrap_model(model)):
        result = chunk.load_state_dict(loaded[_model_key(i, len(model))], strict=False)
        missing = [k for k in result.missing_keys if not k.endswith("_extra_state")]
        if missing or result.unexpected_keys:
            raise RuntimeError(f"checkpoint {path} does not fit the model: missing {missing}, "
                               f"unexpected {result.unexpected_keys}")
    if optimizer is not None:
        optimizer.reload_model_params()


class CheckpointManager:
    """Save/load for one run. All ranks call every method (they contain collectives)."""

    def __init__(self, root: str | Path, keep_last: int | None = None, log=print, async_save: bool = False,
                 owner: str | Path | None = None):
        self.root = Path(root)
        self.owner = str(owner or root)  # the run dir that writes here, named to a second writer (lease)
        self.keep_last = keep_last
        self.log = log
        self.async_save = async_save
        self._queue: Any = None  # megatron AsyncCallsQueue, created on the first async save
        self.in_flight: int | None = None
        self._side_files: dict[int, dict[str, str]] = {}

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
             distributed_optimizer: bool, blocking: bool = True, side_files: dict[str, str] | None = None) -> Path:
        """Write and publish ``iter_N``. With ``async_save`` and ``blocking=False`` only schedule the write;
        ``poll()``/``wait()`` publish it once every rank has finished. ``side_files`` (name → text) land in
        ``iter_N`` with it (written into the partial dir, so they appear with the checkpoint or not at all)."""
        self._side_files[iteration] = dict(side_files or {})
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
        from .interop import megatron_lm

        # As Megatron-LM's _build_sharded_state_dict_metadata: the layout follows the args the checkpoint records.
        fully = bool(getattr(common.get("args"), "dist_ckpt_optim_fully_reshardable", False))
        metadata = megatron_lm.content_metadata(distributed_optimizer, fully_reshardable=fully)
        sd = build_state_dict(model, optimizer, scheduler, {**common, "iteration": iteration},
                              is_loading=False, metadata=metadata)
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

        side_files = self._side_files.pop(iteration, {})
        if dist.get_rank() != 0:
            return
        partial = self.root / (iter_dir_name(iteration) + PARTIAL_SUFFIX)
        for name, text in side_files.items():
            atomic_write(partial / name, text)
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
        _prefill_adam_state(optimizer)
    sd = build_state_dict(model, optimizer, scheduler, {}, is_loading=True, metadata=saved_meta, rerun=False)
    if not plan.restore_rng:
        sd.pop("rng_state")  # RNG streams are per (pp, tp) rank: meaningless after a tp/pp change
    with torch.no_grad():
        loaded = dist_checkpointing.load(sd, str(path))
    for i, chunk in enumerate(unwrap_model(model)):
        chunk.load_state_dict(loaded[_model_key(i, len(model))], strict=True)
    with torch.no_grad():
        if plan.distopt_sharding in _MODEL_SPACE_LOADERS and not _fused_adam(optimizer):
            _load_model_space_distopt(optimizer, loaded["optimizer"])
        else:
            optimizer.load_state_dict(loaded["optimizer"])
    _restore_adam_steps(optimizer)
    scheduler.load_state_dict(loaded["opt_param_scheduler"])
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


def initialize_from(source: str | Path, model: list, optimizer, job, padded_vocab_size: int, log=print) -> Path:
    """``train.init_from``: copy a checkpoint's or a Hugging Face directory's weights into a fresh run.

    Any TP/PP layout of the source works. Unlike a resume, nothing else is taken: the optimizer moments,
    LR schedule, RNG and data position start from zero, and the run's own checkpoints start at iteration 1."""
    from megatron.core import dist_checkpointing

    src = Path(source)
    if (src / "config.json").is_file():
        _initialize_from_hf(src, model, job)
        if optimizer is not None:
            optimizer.reload_model_params()
        path = src
    else:
        path, _iteration, _release = resolve_checkpoint_dir(src)
        common = dist_checkpointing.load_common_state_dict(str(path))
        check_same_model(path, common, job, padded_vocab_size, "train.init_from")
        load_weights(model, optimizer, path, dist_checkpointing.load_content_metadata(preloaded_state_dict=common))
    log(f"[checkpoint] initialized weights from {path} (train.init_from): a new run, not a resume — optimizer "
        f"state, LR schedule and data position start from zero")
    return path


def _initialize_from_hf(src: Path, model: list, job) -> None:
    """Fill this rank's model shards from an HF directory (every rank reads the full tensors it needs)."""
    from .interop import hf

    shape, _arch = hf.shape_from_hf_config(hf.read_hf_config(src), job.model.make_vocab_size_divisible_by)
    m = job.model
    want = {"num_layers": (shape.num_layers, m.num_layers), "hidden_size": (shape.hidden_size, m.hidden_size),
            "ffn_hidden_size": (shape.ffn_hidden_size, m.ffn),
            "num_attention_heads": (shape.num_attention_heads, m.num_attention_heads),
            "num_query_groups": (shape.num_query_groups, m.query_groups),
            "vocab_size": (shape.vocab_size, m.vocab_size),
            "position_embedding": ("rope" if shape.rope else "learned_absolute", m.position_embedding),
            "normalization": ("RMSNorm" if shape.rmsnorm else "LayerNorm", m.normalization),
            "activation": ("swiglu" if shape.swiglu else "gelu", m.activation),
            "add_bias_linear": (shape.bias, m.add_bias_linear), "untie_embeddings": (shape.untie, m.untie_embeddings)}
    bad = [f"model.{k}={ours!r} (the HF model has {theirs!r})" for k, (theirs, ours) in want.items() if theirs != ours]
    if bad:
        raise RuntimeError(f"train.init_from: {src} does not fit this job: " + "; ".join(bad)
                           + "; set the model fields to the HF model's")
    full = {key: t for key, t, _ in hf.megatron_tensors_from_hf(src, m.make_vocab_size_divisible_by, progress=False)}
    fill_model_from_full(model, full, f"train.init_from: {src}")


def fill_model_from_full(model: list, full: dict[str, Any], what: str) -> None:
    """Copy unsharded checkpoint-layout tensors (``decoder.layers.*`` stacked on a leading layer axis) into
    the local shards of ``model``, whatever its TP/PP layout (the slices come from the ShardedTensors)."""
    import torch
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, apply_factories
    from megatron.core.utils import unwrap_model

    from .interop import megatron_lm

    meta = megatron_lm.runtime_metadata(megatron_lm.content_metadata(False))
    with torch.no_grad():
        for chunk in unwrap_model(model):
            sd = chunk.sharded_state_dict(metadata=meta)
            apply_factories(sd)
            for sh in nested_values(sd):
                if not isinstance(sh, ShardedTensor) or "_extra_state" in sh.key:
                    continue
                if sh.key not in full:
                    raise RuntimeError(f"{what} has no weights for {sh.key}")
                t = full[sh.key]
                n = sh.prepend_axis_num
                glob = sh.global_shape
                if t.shape[n] < glob[n]:  # vocabulary padded further for this job's tp
                    t = torch.cat([t, t.new_zeros(*t.shape[:n], glob[n] - t.shape[n], *t.shape[n + 1:])], dim=n)
                index = tuple(sh.global_offset[:n]) + tuple(
                    slice(off, off + size) for off, size in zip(sh.global_offset[n:], sh.local_shape, strict=True))
                sh.data.copy_(t[index].reshape(sh.data.shape))
