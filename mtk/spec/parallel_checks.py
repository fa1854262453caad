"""The parallel arithmetic of a job: world size, tp/pp/cp/ep, batch split, spare-node ranges (each check
``(job, backend) -> list[Problem]`` names both fields and values)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import Problem

if TYPE_CHECKING:
    from .job import Job


def data_parallel_size(job: Job) -> int:
    """DP = GPUs / (TP × PP × CP), as Megatron-Core derives it."""
    p = job.parallel
    return job.cluster.world_size // (p.tp * p.pp * p.cp)


def gpus_divisible_by_model_parallel(job: Job, backend) -> list[Problem]:
    p, c = job.parallel, job.cluster
    mp = p.tp * p.pp * p.cp
    if c.world_size % mp and c.min_nodes is None:  # a spare-node range: spare_nodes_keep_the_batch checks each count
        return [Problem("cluster.procs_per_node", f"nodes × procs_per_node = {c.nodes} × {c.procs_per_node} = "
                        f"{c.world_size} GPUs is not divisible by parallel.tp × pp × cp = {p.tp} × {p.pp} × {p.cp}"
                        f" = {mp}; change the node count or the parallel sizes", c.procs_per_node)]
    return []


def heads_divisible_by_tp(job: Job, backend) -> list[Problem]:
    m, tp = job.model, job.parallel.tp
    out = []
    if m.num_attention_heads % tp:
        out.append(Problem("model.num_attention_heads", f"{m.num_attention_heads} heads must be a multiple of "
                           f"parallel.tp ({tp}); pick a tp that divides it", m.num_attention_heads))
    if m.num_query_groups is not None and m.num_attention_heads % m.num_query_groups:
        out.append(Problem("model.num_query_groups", f"must divide num_attention_heads "
                           f"({m.num_attention_heads})", m.num_query_groups))
    elif m.query_groups % tp and m.num_attention_heads % tp == 0:
        out.append(Problem("model.num_query_groups", f"{m.query_groups} query groups must be a multiple of "
                           f"parallel.tp ({tp})", m.query_groups))
    if m.hidden_size % m.num_attention_heads:
        out.append(Problem("model.hidden_size", f"must be a multiple of num_attention_heads "
                           f"({m.num_attention_heads})", m.hidden_size))
    return out


def layers_divisible_by_pp(job: Job, backend) -> list[Problem]:
    m, p = job.model, job.parallel
    stages = p.pp * (p.virtual_pp or 1)
    if m.num_layers % stages:
        what = f"parallel.pp × virtual_pp ({p.pp} × {p.virtual_pp})" if p.virtual_pp else f"parallel.pp ({p.pp})"
        return [Problem("model.num_layers", f"{m.num_layers} layers must be a multiple of {what}", m.num_layers)]
    if p.virtual_pp and p.pp == 1:
        return [Problem("parallel.virtual_pp", "interleaved stages need parallel.pp > 1", p.virtual_pp)]
    return []


def _batches(job: Job) -> list[int]:
    """Every global batch the run trains: the schedule's steps, else the one global batch."""
    steps = job.train.batch_size_schedule
    return list(dict.fromkeys(s.global_batch_size for s in steps)) if steps else [job.train.global_batch_size]


def global_batch_divisible(job: Job, backend) -> list[Problem]:
    t = job.train
    dp = data_parallel_size(job)
    if not dp:
        return []
    odd = [b for b in _batches(job) if b % (t.micro_batch_size * dp)]
    if not odd:
        return []
    why = (f"train.micro_batch_size × data-parallel size = {t.micro_batch_size} × {dp} = "
           f"{t.micro_batch_size * dp}")
    if t.batch_size_schedule:
        return [Problem("train.batch_size_schedule", f"the global batch of every step must divide by {why} "
                        f"(Megatron-LM stops when it reaches one that does not); {', '.join(map(str, odd))} do "
                        "not: use multiples of it", ", ".join(map(str, odd)))]
    return [Problem("train.global_batch_size", f"{t.global_batch_size} is not divisible by {why}; use a multiple "
                    "of it", t.global_batch_size)]


def spare_nodes_keep_the_batch(job: Job, backend) -> list[Problem]:
    """With ``nodes: MIN:MAX`` every node count in the range must fit the parallel layout and the global batch
    (DP and gradient accumulation are derived from the healthy nodes, the global batch is kept)."""
    c, p, t = job.cluster, job.parallel, job.train
    if c.min_nodes is None:
        return []
    shown = f"{c.min_nodes}:{c.nodes}"
    if c.min_nodes > c.nodes:
        return [Problem("cluster.nodes", f"the spare-node range MIN:MAX has MAX below MIN; write {c.nodes}:"
                        f"{c.min_nodes}", shown)]
    why = _backend(backend).spare_nodes_refused if backend else ""
    if why:
        return [Problem("cluster.nodes", f"a MIN:MAX range (spare nodes) is {why}; set a single count, e.g. "
                        f"{c.nodes}", shown)]
    mp, mb = p.tp * p.pp * p.cp, t.micro_batch_size
    bad = []
    for n in c.node_counts:
        world = n * c.procs_per_node
        if world % mp:
            bad.append(f"{n} nodes: {world} processes not divisible by tp × pp × cp = {mp}")
        elif odd := [b for b in _batches(job) if b % (mb * (world // mp))]:
            what = "train.global_batch_size" if len(odd) == 1 and not t.batch_size_schedule else \
                "train.batch_size_schedule's batch"
            bad.append(f"{n} nodes: {what} {', '.join(map(str, odd))} not divisible by micro_batch_size "
                       f"× DP = {mb} × {world // mp}")
    if bad:
        return [Problem("cluster.nodes", "every node count in the spare-node range must keep the global batch ("
                        + "; ".join(bad) + "); narrow the range or pick a global batch that all of them divide",
                        shown)]
    return []


def seq_fits_positions(job: Job, backend) -> list[Problem]:
    m = job.model
    out = []
    if m.max_position_embeddings is not None and m.seq_length > m.max_position_embeddings:
        out.append(Problem("model.seq_length", f"exceeds model.max_position_embeddings "
                           f"({m.max_position_embeddings}); lower it or raise max_position_embeddings",
                           m.seq_length))
    cp = job.parallel.cp
    if cp > 1 and m.seq_length % (2 * cp):
        out.append(Problem("model.seq_length", f"must be a multiple of 2 × parallel.cp ({2 * cp}) for context "
                           "parallelism", m.seq_length))
    return out


def attention_fits_parallelism(job: Job, backend) -> list[Problem]:
    """torch SDPA and megatron-core's unfused attention both compute a whole sequence on one rank."""
    m, cp = job.model, job.parallel.cp
    if cp > 1 and m.attention_backend in ("sdpa", "unfused"):
        return [Problem("model.attention_backend", f"{m.attention_backend} attention runs without context "
                        "parallelism; use attention_backend: te (Transformer Engine) or parallel.cp: 1",
                        m.attention_backend)]
    return []


def sequence_parallel_needs_tp(job: Job, backend) -> list[Problem]:
    p = job.parallel
    if p.sequence_parallel and p.tp == 1:
        return [Problem("parallel.sequence_parallel", "needs parallel.tp > 1 (it shards activations over "
                        "tensor-parallel ranks); set tp ≥ 2 or turn it off", True)]
    return []


def moe_sizes(job: Job, backend) -> list[Problem]:
    moe, p = job.model.moe, job.parallel
    out = []
    if moe.num_experts == 0:
        if p.ep > 1:
            out.append(Problem("parallel.ep", "expert parallelism needs model.moe.num_experts > 0", p.ep))
        return out
    if moe.num_experts % p.ep:
        out.append(Problem("model.moe.num_experts", f"{moe.num_experts} experts must be divisible by "
                           f"parallel.ep ({p.ep})", moe.num_experts))
    if moe.router_topk > moe.num_experts:
        out.append(Problem("model.moe.router_topk", f"cannot exceed model.moe.num_experts ({moe.num_experts})",
                           moe.router_topk))
    world = job.cluster.world_size
    if world % (p.tp * p.pp * p.ep):
        out.append(Problem("parallel.ep", f"parallel.tp × pp × ep = {p.tp} × {p.pp} × {p.ep} must divide the "
                           f"{world} GPUs (experts are sharded across data-parallel ranks)", p.ep))
    if p.ep > 1 and p.cp > 1:
        out.append(Problem("parallel.ep", "expert parallel together with context parallel is not supported "
                           "by mtk yet; use one of them", p.ep))
    if job.model.add_bias_linear and p.ep == 1 and p.tp == 1:
        # megatron-core 0.19's expert MLP adds its bias in place onto the output of the (identity) TP reduce, which
        # autograd forbids: the first training step dies ("... is a view and is being modified inplace").
        out.append(Problem("model.add_bias_linear", "MoE experts with biases crash at the first training step (the "
                           "local expert MLP adds its bias in place) when parallel.ep = 1 and parallel.tp = 1: "
                           "set model.add_bias_linear: false, or parallel.ep > 1", True))
    return out


def _backend(name: str):
    from mtk.backends import backend_class

    return backend_class(name)
