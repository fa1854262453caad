"""Which Megatron-LM flags change what trains. Every flag has one of three classes:

* **honoured** — a row of the one table, :mod:`mtk.megatron_flags` (asked first, so a row added there is honoured
  here with no change);
* **ignored** — it does not change what trains: logging, profiling, timeouts, checkpoint and data-loader mechanics,
  kernels and memory (the model, data, schedule, parallel layout, precision and optimizer stay the same), or a path
  mtk sets itself; listed with why;
* **changes what trains** — everything else, including every flag in neither list: mtk cannot honour it, so the
  import refuses it by name unless the user allows it to be dropped.

:data:`CHANGES` only words the refusal of well-known flags; a flag missing from it is refused all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mtk import megatron_flags
from mtk.megatron_flags import Flag

Kind = Literal["honoured", "ignored", "changes"]

LOGGING = "logging (mtk writes its own logs, metrics and TensorBoard events)"
PROFILING = "profiling (no change to what trains)"
RESILIENCE = "fault tolerance and time limits (mtk has its own: resilience.*, the scheduler's time limit)"
CHECKPOINT_IO = "how checkpoints are written or found (mtk writes torch_dist checkpoints itself)"
SPEED = "speed or memory only: the same model and numbers train (mtk picks its kernels from the device plan)"
RECOMPUTE = "activation recomputation: memory only (train.recompute)"
LOADER = "data-loader mechanics: the same samples in the same order"
TIKTOKEN = "read only with --tokenizer-type TikTokenizer, which mtk does not take"

HARMLESS: dict[str, str] = {
    **dict.fromkeys(("--logging-level", "--moe-per-layer-logging", "--timing-log-level", "--timing-log-option",
                     "--barrier-with-L1-time", "--disable-straggler-on-startup", "--straggler-minmax-count",
                     "--straggler-ctrlr-port", "--log-straggler"), LOGGING),
    **dict.fromkeys(("--profile", "--profile-step-start", "--profile-step-end", "--profile-ranks",
                     "--use-pytorch-profiler", "--record-memory-history", "--memory-snapshot-path",
                     "--nvtx-ranges"), PROFILING),
    **dict.fromkeys(("--exit-duration-in-mins", "--exit-signal-handler",
                     "--enable-ft-package", "--calc-ft-timeouts", "--rerun-mode",
                     "--check-weight-hash-across-dp-replicas-interval", "--result-rejected-tracker-filename"),
                    RESILIENCE),
    **dict.fromkeys(("--auto-detect-ckpt-format", "--dist-ckpt-strictness", "--ckpt-fully-parallel-save",
                     "--ckpt-fully-parallel-load", "--ckpt-assume-constant-structure", "--async-save",
                     "--use-persistent-ckpt-worker", "--save-retain-interval", "--use-dist-ckpt"), CHECKPOINT_IO),
    **dict.fromkeys(("--no-mmap-bin-files", "--no-create-attention-mask-in-dataloader",
                     "--num-dataset-builder-threads", "--dataloader-save"), LOADER),
    **dict.fromkeys(("--empty-unused-memory-level", "--use-nccl-ub", "--fsdp-double-buffer",
                     "--fsdp-manual-registration", "--ddp-num-buckets", "--tp-comm-overlap",
                     "--tp-comm-overlap-cfg", "--defer-embedding-wgrad-compute", "--wgrad-deferral-limit",
                     "--moe-permute-fusion", "--moe-router-fusion", "--moe-shared-expert-overlap",
                     "--cuda-graph-impl", "--cuda-graph-scope", "--enable-cuda-graph", "--cuda-graph-warmup-steps",
                     "--te-rng-tracker", "--init-model-with-meta-device", "--disable-gloo-process-groups",
                     "--overlap-p2p-communication", "--align-grad-reduce",
                     "--no-align-grad-reduce", "--align-param-gather", "--delay-wgrad-compute",
                     "--high-priority-stream-groups", "--manual-gc-eval",
                     "--enable-experimental", "--export-force-local-attention"), SPEED),
    **dict.fromkeys(("--recompute-modules", "--moe-layer-recompute", "--recompute-vision"), RECOMPUTE),
    **dict.fromkeys(("--tiktoken-pattern", "--tiktoken-num-special-tokens", "--tiktoken-special-tokens"), TIKTOKEN),
}
HARMLESS_PREFIXES: dict[str, str] = {"--log-": LOGGING, "--wandb-": LOGGING, "--tensorboard-": LOGGING,
                                     "--one-logger": LOGGING, "--ft-": RESILIENCE, "--inprocess-": RESILIENCE,
                                     "--non-persistent-": CHECKPOINT_IO}

# Table rows without a spec field whose fixed value mtk always uses: another value computes the same model and
# numbers (an implementation choice), so the script's value is listed as ignored rather than refused.
SAME_MATH: dict[str, str] = {
    "--moe-token-dispatcher-type": "how tokens reach their experts (the same experts compute the same outputs)",
    "--moe-grouped-gemm": "the experts' kernels",
    "--recompute-method": RECOMPUTE,
    "--ckpt-format": CHECKPOINT_IO,
    "--cross-entropy-fusion-impl": "the loss kernel",
}

# Paths mtk sets itself: a value the script leaves unknown is not needed (the spec's default path is used).
PATHS: frozenset[str] = frozenset({"--save", "--load", "--data-cache-path", "--tensorboard-dir"})

# an attention or activation variant megatron-core has and mtk's spec does not (yet): refused, with what it is
NOT_HONOURED = "known, not honoured:"
FSDP = "Megatron-FSDP shards parameters and gradients; mtk trains with DDP and the distributed optimizer"
MLA = "multi-latent attention (DeepSeek's); mtk's GPTModel uses standard attention"
SCHEDULE = "the learning-rate schedule"
CHANGES: dict[str, str] = {
    "--use-megatron-fsdp": FSDP, "--data-parallel-sharding-strategy": FSDP, "--outer-dp-sharding-strategy": FSDP,
    "--window-size": f"sliding-window attention (megatron-core's TransformerConfig.window_size; gpt-oss: 127,0 on "
                     f"every other layer): {NOT_HONOURED} the spec has no field for it, mtk's attention sees the "
                     "whole causal context",
    "--window-attn-skip-freq": f"which layers use sliding-window attention (TransformerConfig.window_attn_skip_freq): "
                               f"{NOT_HONOURED} mtk has no sliding window (--window-size)",
    "--softmax-type": f"the attention softmax (TransformerConfig.softmax_type off-by-one or learnable: gpt-oss's sink, "
                      f"a parameter per head in every attention layer): {NOT_HONOURED} mtk's model uses the vanilla "
                      "softmax and its checkpoints hold no softmax_offset",
    "--quick-geglu": f"the MLP activation (gpt-oss's gated quick-GELU: TransformerConfig.activation_func quick_gelu "
                     f"with gated_linear_unit): {NOT_HONOURED} model.activation is gelu or swiglu",
    "--glu-linear-offset": f"the MLP activation (TransformerConfig.glu_linear_offset, added to the GLU's linear "
                           f"half): {NOT_HONOURED} mtk's GLU (swiglu) has none",
    "--activation-func-clamp-value": f"the MLP activation (TransformerConfig.activation_func_clamp_value clamps what "
                                     f"it reads): {NOT_HONOURED} mtk's activations are not clamped",
    "--enable-gpt-oss": "gpt-oss's YaRN rotary embedding (scaling 32 from 131,072 positions; pretrain_gpt.py takes "
                        "the flag only with nvidia-modelopt installed, and stops at it otherwise): "
                        f"{NOT_HONOURED} mtk's rotary embedding has no YaRN scaling",
    "--qk-layernorm": f"a LayerNorm on queries and keys (TransformerConfig.qk_layernorm): {NOT_HONOURED} mtk's "
                      "attention has none",
    **dict.fromkeys(("--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
                     "--qk-pos-emb-head-dim", "--v-head-dim"), MLA),
    **dict.fromkeys(("--mtp-num-layers", "--mtp-loss-scaling-factor"), "multi-token prediction"),
    "--moe-shared-expert-intermediate-size": "a shared expert",
    "--moe-z-loss-coeff": "the router's z-loss",
    "--no-load-optim": "a resumed run loads the weights without the optimizer state; mtk resumes both (a run from "
                       "other weights is train.init_from)",
    "--no-load-rng": "a resumed run draws new random state; mtk resumes it",
    "--finetune": "the run starts from other weights at iteration 0 (mtk: train.init_from)",
    "--pretrained-checkpoint": "the run starts from other weights (mtk: train.init_from)",
    "--use-checkpoint-args": "the model's shape comes from a checkpoint, not the command",
    "--exit-interval": "training stops after this many iterations", "--exit-on-missing-checkpoint": "no checkpoint: "
    "the run stops",
    "--eod-mask-loss": "the loss skips end-of-document tokens",
    "--reset-position-ids": "positions restart at each document", "--reset-attention-mask": "attention stops at "
    "each document",
    **dict.fromkeys(("--use-rope-scaling", "--rope-scaling-factor", "--rotary-scaling-factor",
                     "--rotary-seq-len-interpolation-factor", "--mscale", "--mscale-all-dim", "--no-rope-freq",
                     "--rope-type"), "the rotary embedding"),
    **dict.fromkeys(("--num-layers-per-virtual-pipeline-stage",
                     "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"),
                    "the parallel layout (mtk has no field for it)"),
    **dict.fromkeys(("--fp8-margin", "--fp8-interval", "--first-last-layers-bf16", "--num-layers-at-start-in-bf16",
                     "--num-layers-at-end-in-bf16", "--use-precision-aware-optimizer",
                     "--disable-bf16-reduced-precision-matmul", "--accumulate-allreduce-grads-in-fp32",
                     "--loss-scale", "--hysteresis", "--loss-scale-window", "--min-loss-scale"), "the precision"),
    "--dataloader-type": "the order samples are drawn in",
    **dict.fromkeys(("--spec", "--hybrid-layer-pattern", "--hybrid-override-pattern", "--is-hybrid-model"),
                    "another model than mtk's GPTModel"),
    **dict.fromkeys(("--lr-wsd-decay-style", "--lr-wsd-decay-iters", "--lr-wsd-decay-samples"), SCHEDULE),
    **dict.fromkeys(("--sft", "--per-split-data-args-path", "--train-data-path", "--valid-data-path",
                     "--test-data-path", "--data-args-path"), "the training data"),
}
UNKNOWN = ("unknown to mtk: it may change the model, data, schedule, parallel layout, precision or optimizer, so it "
           "is not dropped without your word")


@dataclass(frozen=True)
class FlagClass:
    kind: Kind
    why: str
    row: Flag | None = None


def table_row(flag: str) -> Flag | None:
    """The table's row for exactly this flag (not a row whose argparse name or config field merely matches)."""
    row = megatron_flags.lookup(flag)
    if row is not None and row.flag == flag:
        return row
    return next((f for f in megatron_flags.FLAGS if f.flag == flag), None)


def classify(flag: str) -> FlagClass:
    row = table_row(flag)
    if row is not None:
        return FlagClass("honoured", row.why, row)
    by_mtk = getattr(megatron_flags, "SET_BY_MTK", {}).get(flag)
    if by_mtk:
        return FlagClass("ignored", f"set by mtk itself: {by_mtk}")
    if flag in HARMLESS:
        return FlagClass("ignored", HARMLESS[flag])
    for prefix, why in HARMLESS_PREFIXES.items():
        if flag.startswith(prefix):
            return FlagClass("ignored", why)
    return FlagClass("changes", CHANGES.get(flag, UNKNOWN))
