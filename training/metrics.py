"""Training metrics: Megatron-style iteration lines, ``metrics.jsonl`` and TensorBoard scalars.

``<run_dir>/metrics.jsonl`` (rank 0 appends; one JSON object per line):

* training record, one per logged iteration::

    {"kind": "train", "iteration": int, "consumed_samples": int, "lm_loss": float, "lr": float,
     "grad_norm": float | null, "loss_scale": float, "step_time_ms": float, "tokens_per_s": float,
     "tflops_per_gpu": float, "flops_convention": "megatron-lm", "skipped": int, "nan": int,
     "global_batch_size": int, "restart_count": int, "time": float (unix seconds)}

  ``lm_loss`` and ``step_time_ms`` are averages over the iterations since the previous record;
  ``skipped``/``nan`` count those iterations (skipped = optimizer step not taken, e.g. fp16 overflow).
  Extra keys may appear (``moe_aux_loss``; ``decoupled_lr``, the embedding/output layers' LR with
  ``train.decoupled_lr``) — readers must ignore keys they do not know.

* evaluation record, every ``train.eval_interval``::

    {"kind": "eval", "iteration": int, "lm_loss": float, "ppl": float, "restart_count": int, "time": float}

* straggler record, every ``resilience.stragglers.interval`` iterations (``training/stragglers.py``)::

    {"kind": "stragglers", "iteration": int, "median_forward_ms": float, "median_step_ms": float,
     "threshold": float, "slowest_ranks": [{"rank", "host", "forward_ms", "step_ms", "ratio"}, ...],
     "slowest_nodes": [{"host", "ratio"}, ...], "stragglers": [rank, ...], "time": float}

  When ``stragglers`` is not empty the next training record carries ``"straggler": "rank R (host) X.XXx
  median forward"`` and so does its iteration line.

``restart_count`` is ``SLURM_RESTART_COUNT`` (Slurm requeues) or ``TORCHELASTIC_RESTART_COUNT``
(torchrun/PyTorchJob elastic restarts), else 0.

Throughput: tokens/s = global batch × seq length / step time (with ``train.batch_size_schedule``: the batches the
iterations since the last record trained; ``global_batch_size`` is the last one's, as Megatron-LM logs it). TFLOP/s
per GPU counts FLOPs as megatron-core 0.19's ``num_floating_point_operations`` (``megatron/training/training.py``)
does, so MFU compares with Megatron-LM logs (:data:`FLOPS_CONVENTION`, recorded in every train record): every GEMM
runs three times (forward, weight-grad, data-grad), at 2 FLOPs per multiply-add, for attention projections (with
GQA), the attention score/context products under the *causal* mask (half of the s × s products: before #26 mtk
counted all of them, 4-12% more at seq 2048-8192), the MLP (×1.5 for SwiGLU's third matrix; for MoE the *routed*
top-k experts, i.e. active parameters) and the output logits; divided by step time × world size.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtk import run_layout
from mtk.files import open_append

if TYPE_CHECKING:
    from mtk.spec import Job


def restart_count(env: Mapping[str, str] | None = None) -> int:
    """The scheduler's requeue count (its backend reads it), else torchrun's own restarts of this worker group."""
    from mtk.rendezvous import digits, node_place

    env = os.environ if env is None else env
    return node_place(env).restarts or digits(env, "TORCHELASTIC_RESTART_COUNT") or 0


FLOPS_CONVENTION = "megatron-lm"
"""The ``flops_convention`` of train records: Megatron-LM's count (causal attention). Records without the key
were written before it and counted full (non-causal) attention."""


def flops_per_iteration(job: Job, padded_vocab: int, batch: int | None = None) -> float:
    """Model FLOPs of one optimizer step (forward + backward) over ``batch`` sequences (default: the global batch),
    as Megatron-LM counts them (causal attention: the score and context GEMMs cover half of the s × s matrix)."""
    m = job.model
    b = job.train.global_batch_size if batch is None else batch
    s, layers, h = m.seq_length, m.num_layers, m.hidden_size
    kv_channels = h // m.num_attention_heads
    q_ratio = kv_channels * m.num_attention_heads / h
    gated = 1.5 if m.activation == "swiglu" else 1.0
    if m.moe.num_experts:
        ffn, routed = (m.moe.ffn_hidden_size or m.ffn), m.moe.router_topk
    else:
        ffn, routed = m.ffn, 1
    per_token_terms = (
        (1 + m.query_groups / m.num_attention_heads + s / (2 * h)) * q_ratio  # qkv+proj, causal scores+context
        + (ffn / h) * routed * gated                                     # MLP (active experts only)
        + padded_vocab / (2 * layers * h)                                # output logits
    )
    return 3 * 2 * 2 * b * s * layers * h * h * per_token_terms


def logged_lrs(param_groups: list[dict]) -> tuple[float, float | None]:
    """(the LR of the groups on the default schedule, the embedding/output layers' decoupled LR or None).

    megatron-core marks groups whose LR an override changed (``train.decoupled_lr``) with ``default_config:
    False``; the first group may be one of them, so the logged LR is read from a default group, as
    Megatron-LM's ``get_canonical_lr_for_logging`` does."""
    default = [g for g in param_groups if g.get("default_config", True)]
    decoupled = [g for g in param_groups if not g.get("default_config", True)]
    lr = (default or param_groups)[0]["lr"]
    return lr, (decoupled[0]["lr"] if decoupled else None)


PACE_WINDOW = 20  # iterations the ETA's pace is measured over (``mtk ls`` uses the same window)


def format_duration(seconds: float) -> str:
    """``3m12s``, ``2h05m``, ``1d04h``: the two largest units, short enough for a log line."""
    s = max(0, round(seconds))
    for big, small, size, sub in (("d", "h", 86400, 3600), ("h", "m", 3600, 60), ("m", "s", 60, 1)):
        if s >= size:
            return f"{s // size}{big}{(s % size) // sub:02d}{small}"
    return f"{s}s"


def format_line(rec: dict[str, Any], total_iters: int, eta_s: float | None = None) -> str:
    """The Megatron-LM iteration line, plus throughput and (given ``eta_s``) the time left at the recent pace."""
    gn = rec["grad_norm"]
    parts = [
        f" iteration {rec['iteration']:8d}/{total_iters:8d}",
        f"consumed samples: {rec['consumed_samples']:12d}",
        f"elapsed time per iteration (ms): {rec['step_time_ms']:.1f}",
        f"throughput per GPU (TFLOP/s/GPU): {rec['tflops_per_gpu']:.3f}",
        f"tokens/s: {rec['tokens_per_s']:.0f}",
        f"learning rate: {rec['lr']:.6E}",
        *([f"decoupled learning rate: {rec['decoupled_lr']:.6E}"] if rec.get("decoupled_lr") is not None else []),
        f"global batch size: {rec['global_batch_size']:5d}",
        f"lm loss: {rec['lm_loss']:.6E}",
        f"loss scale: {rec['loss_scale']:.1f}",
        f"grad norm: {gn:.3f}" if gn is not None else "grad norm: n/a",
        f"number of skipped iterations: {rec['skipped']:3d}",
        f"number of nan iterations: {rec['nan']:3d}",
    ]
    if "moe_aux_loss" in rec:
        after_loss = next(i for i, part in enumerate(parts) if part.startswith("lm loss")) + 1
        parts.insert(after_loss, f"load balancing loss: {rec['moe_aux_loss']:.6E}")
    if eta_s is not None:
        parts.append(f"ETA {format_duration(eta_s)}")
    if rec.get("straggler"):
        parts.append(f"straggler: {rec['straggler']}")
    return " | ".join(parts) + " |"


class MetricsWriter:
    """Rank 0 writes lines, JSONL and TensorBoard; other ranks keep nothing."""

    def __init__(self, job: Job, run_dir: str | Path, rank: int, world_size: int, padded_vocab: int,
                 tensorboard: bool = True):
        self.job = job
        self.enabled = rank == 0
        self.world = world_size
        self.path = Path(run_dir) / run_layout.METRICS_FILE
        self.flops_per_sample = flops_per_iteration(job, padded_vocab, batch=1)
        from mtk.batch_schedule import BatchSchedule

        self.schedule = BatchSchedule.of(job)
        self.restarts = restart_count()
        self.tb = None
        self._straggler_note: str | None = None
        self._stamps: deque[float] = deque(maxlen=PACE_WINDOW + 1)  # when each of the last iterations ended
        self._stamp_samples: deque[int] = deque(maxlen=PACE_WINDOW + 1)  # and the batch each of them trained
        self._batch = job.train.global_batch_size
        self._reset()
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # lives as long as the run; line-buffered: tail -f and crash safe per line; never through a link
            self._fh = open_append(self.path, buffering=1)
            if tensorboard:
                self.tb = _summary_writer(Path(run_dir) / run_layout.TENSORBOARD_DIR)

    def _reset(self) -> None:
        self._loss_sum = 0.0
        self._loss_n = 0
        self._time_sum = 0.0
        self._iters = 0
        self._samples = 0
        self._skipped = 0
        self._nan = 0
        self._aux = 0.0
        self._aux_n = 0

    def step(self, loss: float, step_time_s: float, skipped: bool, aux_loss: float | None = None,
             batch: int | None = None) -> None:
        """Accumulate one iteration of ``batch`` sequences (default: the global batch; call on every rank: cheap;
        only rank 0 keeps the numbers)."""
        self._batch = self.job.train.global_batch_size if batch is None else batch
        self._stamps.append(time.monotonic())
        self._stamp_samples.append(self._batch)
        self._iters += 1
        self._samples += self._batch
        self._time_sum += step_time_s
        if math.isnan(loss) or math.isinf(loss):
            self._nan += 1
        else:
            self._loss_sum += loss
            self._loss_n += 1
        self._skipped += int(skipped)
        if aux_loss is not None:
            self._aux += aux_loss
            self._aux_n += 1

    def log(self, iteration: int, consumed: int, lr: float, grad_norm: float | None,
            loss_scale: float, decoupled_lr: float | None = None) -> dict[str, Any] | None:
        if not self._iters:
            return None
        step_s = self._time_sum / self._iters
        seconds = max(self._time_sum, 1e-12)
        rec: dict[str, Any] = {
            "kind": "train",
            "iteration": iteration,
            "consumed_samples": consumed,
            "lm_loss": self._loss_sum / self._loss_n if self._loss_n else float("nan"),
            "lr": lr,
            "grad_norm": None if grad_norm is None or math.isnan(grad_norm) else float(grad_norm),
            "loss_scale": float(loss_scale),
            "step_time_ms": step_s * 1e3,
            "tokens_per_s": self._samples * self.job.model.seq_length / seconds,
            "tflops_per_gpu": self.flops_per_sample * self._samples / (seconds * self.world * 1e12),
            "flops_convention": FLOPS_CONVENTION,
            "skipped": self._skipped,
            "nan": self._nan,
            "global_batch_size": self._batch,
            "restart_count": self.restarts,
            "time": time.time(),
        }
        if decoupled_lr is not None:
            rec["decoupled_lr"] = decoupled_lr
        if self._aux_n:
            rec["moe_aux_loss"] = self._aux / self._aux_n
        if self._straggler_note:
            rec["straggler"], self._straggler_note = self._straggler_note, None
        self._reset()
        if self.enabled:
            print(format_line(rec, self.job.train.iterations, self.eta(iteration, step_s, consumed)), flush=True)
            self._write(rec)
            if self.tb is not None:
                for key in ("lm_loss", "lr", "grad_norm", "loss_scale", "step_time_ms", "tokens_per_s",
                            "tflops_per_gpu", "moe_aux_loss"):
                    if rec.get(key) is not None:
                        self.tb.add_scalar(f"train/{key}", rec[key], iteration)
                self.tb.flush()
        return rec

    def eta(self, iteration: int, step_s: float, consumed: int | None = None) -> float:
        """Seconds left: the remaining iterations at the mean wall time per iteration over the last
        ``PACE_WINDOW`` (evals and saves included, as they will recur); the step time until two have ended. Under a
        batch-size schedule (given ``consumed``) the remaining samples at the recent wall time per sample: later
        iterations train bigger batches."""
        stamps = self._stamps
        if consumed is not None and not self.schedule.constant:
            left = max(0, self.schedule.samples(self.job.train.iterations) - consumed)
            trained = sum(list(self._stamp_samples)[1:])
            per_sample = (stamps[-1] - stamps[0]) / trained if len(stamps) > 1 and trained else \
                step_s / max(self._batch, 1)
            return left * per_sample
        pace = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else step_s
        return max(0, self.job.train.iterations - iteration) * pace

    def log_eval(self, iteration: int, loss: float) -> dict[str, Any]:
        rec = {"kind": "eval", "iteration": iteration, "lm_loss": loss,
               "ppl": math.exp(min(loss, 20.0)), "restart_count": self.restarts, "time": time.time()}
        if self.enabled:
            print(f" validation loss at iteration {iteration} | lm loss value: {loss:.6E} | "
                  f"lm loss PPL: {rec['ppl']:.6E} |", flush=True)
            self._write(rec)
            if self.tb is not None:
                self.tb.add_scalar("valid/lm_loss", loss, iteration)
                self.tb.flush()
        return rec

    def stragglers(self, rec: dict[str, Any] | None) -> None:
        """Write a ``stragglers`` record (see training/stragglers.py) and name any straggler on the next line."""
        if rec is None or not self.enabled:
            return
        from .stragglers import describe

        self._write(rec)
        self._straggler_note = describe(rec)

    def _write(self, rec: dict[str, Any]) -> None:
        self._fh.write(json.dumps(rec) + "\n")

    def close(self) -> None:
        if self.enabled:
            self._fh.close()
            if self.tb is not None:
                self.tb.close()


def _summary_writer(path: Path):
    """TensorBoard writer when the ``tensorboard`` package is installed; None (and a note) otherwise."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("[metrics] tensorboard is not installed: no TensorBoard scalars (pip install tensorboard)",
              flush=True)
        return None
    return SummaryWriter(log_dir=str(path))
