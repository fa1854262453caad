"""Activation memory per GPU, the figure ``mtk validate`` adds to weights + grads + optimizer state.

Megatron-LM's theoretical-memory formula (``megatron/training/theoretical_memory_usage.py`` in megatron-core
0.19, after Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 2),
for the first pipeline stage, which holds the most: ``pp`` micro-batches in flight × ``L/pp`` layers each =
``L`` layers' activations (fewer when a step has fewer micro-batches than stages; more with the interleaved
schedule), plus the embedding's, plus the output layer's and the loss's when there is one stage. Bytes per
layer, with ``s`` tokens per sequence, ``b`` the micro-batch, ``h`` hidden, ``f`` FFN, ``t`` tensor parallel:

* sequence parallel: ``s·b·h·(18 + 4·f/h)/t`` — everything is split over ``t``;
* otherwise: ``s·b·h·(10 + 24/t)`` — norms, dropout masks and the GEMM inputs outside the TP region stay whole,
  and the whole sum is taken 5% higher for temporaries, as Megatron-LM does.

Both leave out the ``5·a·s²·b/t`` attention-score term: flash / fused attention (Transformer Engine, the GPU
image) never stores the scores, which is what selective recompute achieves without it. Where Megatron-LM's
function is silent mtk extends it, and says so:

* ``recompute: none`` with sequence parallel uses the sequence-parallel formula (Megatron-LM applies it only
  with selective recompute; with fused attention the two keep the same tensors);
* ``recompute: full`` (uniform, ``recompute_num_layers`` = n) keeps each n-layer block's input
  (``2·s·b·h`` bytes, ``/t`` with sequence parallel) and, during one block's backward, that block's n layers'
  activations once;
* context parallelism splits the sequence: ``s`` is ``seq_length / cp`` everywhere.

bf16/fp16/fp8 activations are 2 bytes; fp32 training doubles the estimate.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec.job import Job


def _layer_bytes(sbh: float, f_over_h: float, tp: int, sp: bool) -> float:
    """One layer's stored activations without recompute (fused attention)."""
    return sbh * (18 + 4 * f_over_h) / tp if sp else sbh * (10 + 24 / tp)


def activation_bytes(job: Job, num_microbatches: int, padded_vocab_size: int) -> float:
    """Peak activation bytes on the most loaded GPU (first pipeline stage) for one training step."""
    m, p, t = job.model, job.parallel, job.train
    tp, pp, vp = p.tp, p.pp, p.virtual_pp
    sp = p.sequence_parallel and tp > 1
    s = m.seq_length / p.cp
    b, h, layers = t.micro_batch_size, m.hidden_size, m.num_layers
    sbh = s * b * h
    per_layer = _layer_bytes(sbh, m.ffn / h, tp, sp)
    if t.recompute == "full":
        n = min(t.recompute_num_layers, layers)
        kept_input = 2 * sbh / (tp if sp else 1)
        total = kept_input * math.ceil(layers / n) + n * per_layer
    else:
        total = per_layer * layers
    embedding = 8 * s * b * pp + sbh * pp  # token/position ids, embedding dropout (pp micro-batches in flight)
    total += embedding / tp if sp else embedding
    if vp:
        total *= 1 + (pp - 1) / (pp * vp)  # interleaved schedule: more micro-batches in flight
    elif pp > 1:
        total *= min(1.0, num_microbatches / pp)
    if pp == 1:  # final norm output, logits and the loss's fp32 copy live on this stage too
        vocab = padded_vocab_size
        total += 4 * sbh * (1 + vocab / h) / tp if sp else 2 * (s * b * vocab / tp + sbh)
    if not sp:
        total *= 1.05
    return total * (2 if t.precision == "fp32" else 1)
