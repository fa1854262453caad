"""Derived figures shown by ``mtk validate``: sizes, batch arithmetic, parameter count and memory per GPU.

Parameter count follows Megatron-Core's GPTModel layout (QKV with GQA, MLP with GELU or SwiGLU, norms,
embeddings, untied output layer, MoE experts). The memory estimate is the standard mixed-precision Adam
accounting (weights + main grads + fp32 master/moments); activations per Megatron-LM's theoretical-memory
formula (:mod:`.activations`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from .activations import activation_bytes
from .spec.parallel_checks import data_parallel_size
from .vocabulary import Vocabulary, built

if TYPE_CHECKING:
    from .spec.job import Job


def parameter_counts(job: Job, vocab: Vocabulary | None = None) -> tuple[int, int]:
    """(total, active per token) parameters of the model built with ``vocab`` (default: :func:`built`'s)."""
    m = job.model
    h, f, layers = m.hidden_size, m.ffn, m.num_layers
    padded = (vocab or built(job)).padded
    kv = h // m.num_attention_heads * m.query_groups
    bias = 1 if m.add_bias_linear else 0
    attention = h * (h + 2 * kv) + (h + 2 * kv) * bias + h * h + h * bias
    mlp_matrices = 3 if m.activation == "swiglu" else 2
    mlp_out = (2 * f if m.activation == "swiglu" else f) * bias + h * bias

    def mlp(ffn: int) -> int:
        return mlp_matrices * h * ffn + mlp_out

    norm = 2 * h if m.normalization == "LayerNorm" else h
    experts = m.moe.num_experts
    if experts:
        expert_ffn = m.moe.ffn_hidden_size or f
        mlp_total = experts * mlp(expert_ffn) + h * experts
        mlp_active = m.moe.router_topk * mlp(expert_ffn) + h * experts
    else:
        mlp_total = mlp_active = mlp(f)
    per_layer_fixed = attention + 2 * norm
    embeddings = padded * h + (m.max_positions * h if m.position_embedding == "learned_absolute" else 0)
    output = padded * h if m.untie_embeddings else 0
    fixed = embeddings + output + norm
    total = fixed + layers * (per_layer_fixed + mlp_total)
    active = fixed + layers * (per_layer_fixed + mlp_active)
    return total, active


@dataclass(frozen=True)
class Figures:
    world_size: int
    data_parallel: int
    micro_batches_per_step: int
    parameters: int
    active_parameters: int
    tokens_per_step: int
    parameters_per_gpu: int
    gib_per_gpu: float
    gib_per_gpu_distributed_optimizer: float
    activation_gib_per_gpu: float

    def as_dict(self) -> dict:
        return asdict(self)


def bytes_per_parameter(precision: str, dp: int, distributed: bool) -> float:
    """Weights + grads + optimizer state. Mixed precision: 2 + 4 + 12 (fp32 master, Adam m, v).

    With the distributed optimizer the 12 bytes of fp32 state are sharded over data-parallel ranks.
    fp32 training: 4 (weights) + 4 (grads) + 8 (Adam m, v).
    """
    if precision == "fp32":
        weights, grads, state = 4, 4, 8
    else:
        weights, grads, state = 2, 4, 12
    return weights + grads + (state / dp if distributed else state)


def compute(job: Job, parameters_per_rank: int | None = None, vocab: Vocabulary | None = None) -> Figures:
    """``parameters_per_rank``: counted on megatron-core's meta-device model (``megatron_check``) when known;
    otherwise an even split of the formula's total over the model-parallel ranks. ``vocab``: the built
    vocabulary (default: :func:`mtk.vocabulary.built`'s, the tokenizer's where one is named)."""
    p, t = job.parallel, job.train
    dp = data_parallel_size(job)
    vocab = vocab or built(job)
    total, active = parameter_counts(job, vocab)
    per_gpu = parameters_per_rank if parameters_per_rank is not None else (
        total // (p.tp * p.pp) if not job.model.moe.num_experts else total // (p.tp * p.pp * p.ep))
    gib = 1024**3
    micro_batches = t.micro_batches(dp) if dp else 0
    return Figures(
        world_size=job.cluster.world_size,
        data_parallel=dp,
        micro_batches_per_step=micro_batches,
        parameters=total,
        active_parameters=active,
        tokens_per_step=t.global_batch_size * job.model.seq_length,
        parameters_per_gpu=per_gpu,
        gib_per_gpu=round(per_gpu * bytes_per_parameter(t.precision, dp, False) / gib, 2),
        gib_per_gpu_distributed_optimizer=round(per_gpu * bytes_per_parameter(t.precision, dp, True) / gib, 2),
        activation_gib_per_gpu=round(activation_bytes(job, max(micro_batches, 1), vocab.padded) / gib, 2),
    )
