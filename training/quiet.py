"""Silence the warnings every CPU/no-Apex run prints and no user can act on; let every other warning through.

Each entry names the exact message and why it is known noise here. They are matched by message (and, for
megatron-core's log records, by logger), never by category, so a new or unexpected warning still shows.

* "Apex is not installed. Falling back to Torch Norm": megatron-core's layer-spec modules warn at import
  (once per module, four times a run); the engine chooses the torch norm on purpose (``training/norms.py``).
* "Transformer Engine and Apex are not installed. Falling back to ...": the optimizer, grad-clip and FSDP
  modules say the same at import, four more per rank; without TE/Apex (CPU, the slim image) the torch
  fallbacks are the ones the engine uses, and with them installed the message never appears.
* "MimoModelConfig is experimental": printed when megatron-core's package imports its multimodal configs,
  a model mtk does not build.
* "GPTModel IS DEPRECATED ... HybridModel": megatron-core 0.19's notice at every model build; mtk builds the
  GPT model its checkpoints and Megatron-LM interop are defined for, so the user has no switch to flip.
* "Implicit initialization of Rerun State Machine!" / "RerunStateMachine initialized in mode ...": the
  checkpoint code creates megatron's rerun state machine in its default, disabled mode; mtk does not use it.
* "MCore's async save is deprecated ... nvrx": the replacement (NVRx, nvidia-resiliency-ext) needs CUDA-only
  builds and a newer glibc than the images here; the mcore strategy is the one mtk can run (see
  ``training/checkpoint.py``). Printed once per rank per run.
* "... DTensor instead and we are deprecating ShardedTensor": torch's note about megatron-core's checkpoint
  format, which mtk must keep writing for Megatron-LM compatibility.
* "torch.distributed is disabled, unavailable or uninitialized, assuming the intent is to load in a single
  process" and "The argument order of load has been changed": torch.distributed.checkpoint's notes on every
  resume (three per rank), because megatron-core reads the common state and the metadata on each rank on purpose
  with ``no_dist=True`` and passes the storage reader positionally; nothing for the user to change.

One process that is rank 0 by design (:func:`single_process`: the preprocess step's index-cache build) also drops
megatron-core's "Could not determine rank from torch.distributed, RANK, or SLURM_PROCID. Defaulting to rank 0.":
rank 0 is right there.

``MTK_DEBUG=1`` (the switch ``mtk --debug`` sets, inherited by a run the launching shell starts) turns every
filter here off, so anything this module hides can be seen again.

On a CPU run only (:func:`for_device`): megatron-core's tensor-parallel layers recommend
``CUDA_DEVICE_MAX_CONNECTIONS=1`` whenever TP > 1 (async grad all-reduce) or sequence parallelism is on. The
variable orders CUDA kernel launches; a CPU run has none. On GPU the warning stays: the launchers set the
variable where it helps (``mtk/netenv.py``: Hopper and older with TP/CP/SP), so it appears only when a
user's ``cluster.env`` overrides that — which they can act on.
"""

from __future__ import annotations

import logging
import warnings

WARNINGS: tuple[str, ...] = (
    r"Apex is not installed\. Falling back to Torch Norm",
    r"Transformer Engine and Apex are not installed\. Falling back to ",
    r"MimoModelConfig is experimental and still under active development",
    r"Please use DTensor instead and we are deprecating ShardedTensor",
    r"torch\.distributed is disabled, unavailable or uninitialized, assuming the intent is to load in a single "
    r"process",
    r"The argument order of load has been changed",
)
SINGLE_PROCESS_WARNINGS: tuple[str, ...] = (
    r"Could not determine rank from torch\.distributed, RANK, or SLURM_PROCID",
)
CPU_WARNINGS: tuple[str, ...] = (
    r"When using sequence parallelism it is recommended to set the environment variable "
    r"CUDA_DEVICE_MAX_CONNECTIONS to 1",
    r"When using async grad allreduce it is recommended to set the environment variable "
    r"CUDA_DEVICE_MAX_CONNECTIONS to 1",
)
# (logger name, message start): a logger's filters see only the records logged on that very logger.
LOG_RECORDS: tuple[tuple[str, str], ...] = (
    ("megatron.core.dist_checkpointing.strategies.torch", "MCore's async save is deprecated"),
    ("megatron.core.models.gpt.gpt_model", "GPTModel IS DEPRECATED. GPTModel is only accepting critical bug fixes"),
    ("megatron.core.rerun_state_machine", "Implicit initialization of Rerun State Machine!"),
    ("megatron.core.rerun_state_machine", "RerunStateMachine initialized in mode RerunMode.DISABLED"),
)


class _DropKnown(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(record.name == name and text.startswith(start) for name, start in LOG_RECORDS)


_FILTER = _DropKnown()


def _debug() -> bool:
    from mtk.failures import debug_enabled

    return debug_enabled()


def install() -> None:
    """Idempotent; call before megatron-core is imported (its spec modules warn at import). A no-op with
    ``MTK_DEBUG=1``."""
    if _debug():
        return
    for message in WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    for name, _ in LOG_RECORDS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def for_device(device: str) -> None:
    """The device-specific part, once the job is known; call before the first training step."""
    if device == "cpu" and not _debug():
        for message in CPU_WARNINGS:
            warnings.filterwarnings("ignore", message=message)


def single_process() -> None:
    """In a process that is rank 0 by design, outside torchrun: also drop megatron-core's rank guess (and what
    :func:`install` drops). A no-op with ``MTK_DEBUG=1``."""
    install()
    if not _debug():
        for message in SINGLE_PROCESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
