"""Megatron-LM command-line flags equivalent to an mtk job spec (test scaffolding).

These are the flags a user gives ``pretrain_gpt.py`` for the same run; none is an override flag
(no --override-opt-param-scheduler, --no-load-rng, --no-load-optim, --finetune, --use-checkpoint-args).
"""

from __future__ import annotations


def megatron_lm_argv(job, load_dir: str) -> list[str]:
    m, p, t = job.model, job.parallel, job.train
    argv = [
        "--num-layers", m.num_layers, "--hidden-size", m.hidden_size, "--ffn-hidden-size", m.ffn,
        "--num-attention-heads", m.num_attention_heads, "--seq-length", m.seq_length,
        "--max-position-embeddings", m.max_positions, "--micro-batch-size", t.micro_batch_size,
        "--global-batch-size", t.global_batch_size, "--train-iters", t.iterations, "--lr", t.lr,
        "--min-lr", t.min_lr, "--lr-decay-style", t.lr_decay_style, "--lr-warmup-iters", t.lr_warmup_iters,
        "--weight-decay", t.weight_decay, "--adam-beta1", t.adam_beta1, "--adam-beta2", t.adam_beta2,
        "--adam-eps", t.adam_eps, "--clip-grad", t.clip_grad, "--seed", t.seed,
        "--tensor-model-parallel-size", p.tp, "--pipeline-model-parallel-size", p.pp,
        "--tokenizer-type", "NullTokenizer", "--vocab-size", m.vocab_size,
        "--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by,
        "--hidden-dropout", m.hidden_dropout, "--attention-dropout", m.attention_dropout,
        "--normalization", m.normalization, "--position-embedding-type", m.position_embedding,
        "--ckpt-format", "torch_dist", "--load", load_dir, "--mock-data",
    ]
    if t.lr_decay_iters:
        argv += ["--lr-decay-iters", t.lr_decay_iters]
    if m.query_groups != m.num_attention_heads:
        argv += ["--group-query-attention", "--num-query-groups", m.query_groups]
    if m.activation == "swiglu":
        argv.append("--swiglu")
    if not m.add_bias_linear:
        argv.append("--disable-bias-linear")
    if m.untie_embeddings:
        argv.append("--untie-embeddings-and-output-weights")
    if p.distributed_optimizer:
        argv.append("--use-distributed-optimizer")
    if t.precision == "bf16":
        argv.append("--bf16")
    if m.moe.num_experts:
        argv += ["--num-experts", m.moe.num_experts, "--moe-router-topk", m.moe.router_topk,
                 "--expert-model-parallel-size", p.ep, "--moe-token-dispatcher-type", "alltoall",
                 "--moe-aux-loss-coeff", m.moe.aux_loss_coeff]
    return [str(a) for a in argv]
