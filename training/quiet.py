"""Silence the warnings every CPU/no-Apex run prints and no user can act on; let every other warning through.

Each entry names the exact message and why it is known noise here. They are matched by message (and, for
megatron-core's log records, by logger), never by category, so a new or unexpected warning still shows.

* "Apex is not installed. Falling back to Torch Norm": megatron-core's layer-spec modules warn at import
  (once per module, four times a run); the engine chooses the torch norm on purpose (``training/norms.py``).
* "MCore's async save is deprecated ... nvrx": the replacement (NVRx, nvidia-resiliency-ext) needs CUDA-only
  builds and a newer glibc than the images here; the mcore strategy is the one mtk can run (see
  ``training/checkpoint.py``). Printed once per rank per run.
* "... DTensor instead and we are deprecating ShardedTensor": torch's note about megatron-core's checkpoint
  format, which mtk must keep writing for Megatron-LM compatibility.
"""

from __future__ import annotations

import logging
import warnings

WARNINGS: tuple[str, ...] = (
    r"Apex is not installed\. Falling back to Torch Norm",
    r"Please use DTensor instead and we are deprecating ShardedTensor",
)
# (logger name, message start): a logger's filters see only the records logged on that very logger.
LOG_RECORDS: tuple[tuple[str, str], ...] = (
    ("megatron.core.dist_checkpointing.strategies.torch", "MCore's async save is deprecated"),
)


class _DropKnown(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(record.name == name and text.startswith(start) for name, start in LOG_RECORDS)


_FILTER = _DropKnown()


def install() -> None:
    """Idempotent; call before megatron-core is imported (its spec modules warn at import)."""
    for message in WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    for name, _ in LOG_RECORDS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
