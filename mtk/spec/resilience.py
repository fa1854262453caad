"""``resilience``: hang watchdog, straggler statistics and the pre-flight health gate.

The watchdog's timeouts are derived from what the run measures (``factor`` × the slowest step or save seen
so far, never below ``min_timeout``); the ``*_timeout`` fields override the derived value for one phase.
"""

from __future__ import annotations

from pydantic import Field

from .base import Section


class WatchdogSpec(Section):
    """Every rank reports progress; the node's ``mtk-entrypoint train`` ends a run that stopped reporting."""

    enabled: bool = Field(True, description="Detect hangs and exit with code 45 (HANG) instead of waiting for "
                                            "the NCCL timeout or the time limit.")
    factor: float = Field(5.0, gt=1, description="Timeout = factor × the slowest measured step (or save).")
    min_timeout: float = Field(60.0, gt=0, description="Seconds: derived timeouts never go below this.")
    step_timeout: float | None = Field(None, gt=0, description="Seconds without a finished iteration that "
                                                               "count as a hang (overrides the derived value).")
    save_timeout: float | None = Field(None, gt=0, description="Seconds a checkpoint save may take (overrides "
                                                               "the derived value).")
    startup_timeout: float = Field(1800.0, gt=0, description="Seconds for set-up, checkpoint load and the first "
                                                             "iteration, before any step time is known.")
    interval: float = Field(5.0, gt=0, le=60, description="Seconds between heartbeat publications and checks.")


class StragglerSpec(Section):
    """Per-rank step and section times, gathered on the existing per-iteration all-reduce every N steps."""

    enabled: bool = Field(True, description="Gather per-rank times and name the slowest ranks/nodes.")
    interval: int = Field(50, ge=1, description="Iterations between gathers (and metrics.jsonl records).")
    threshold: float = Field(1.3, gt=1, description="A rank slower than threshold × the median is named on "
                                                    "the iteration line.")


class PreflightSpec(Section):
    """The health gate (``mtk-entrypoint preflight``) every node passes before a Slurm training job trains."""

    enabled: bool = Field(True, description="Run the gate before training on Slurm and EKS (`mtk launch "
                                            "--no-preflight` turns it off); on Slurm a failing node is excluded, "
                                            "too few healthy refuse.")
    allreduce_mb: float = Field(64.0, gt=0, le=4096, description="Size of the timed all-reduce (bus bandwidth).")
    min_busbw_gbps: float | None = Field(None, gt=0, description="Fail nodes below this all-reduce bus bandwidth "
                                         "(GB/s); default: the instance type's floor (mtk/netenv.py).")


class ResilienceSpec(Section):
    """Hang and straggler detection, and the pre-flight health gate."""

    watchdog: WatchdogSpec = Field(default_factory=WatchdogSpec)
    stragglers: StragglerSpec = Field(default_factory=StragglerSpec)
    preflight: PreflightSpec = Field(default_factory=PreflightSpec)
