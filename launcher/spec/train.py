"""``train``: batch sizes, schedule, precision, checkpointing and logging."""

from typing import Literal

from pydantic import Field

from .base import Section


class CheckpointSpec(Section):
    """Where and how often to save. Resume is automatic from ``dir``'s latest-iteration tracker."""

    dir: str | None = Field(
        None, description="Checkpoint directory on shared storage (default: <run dir>/checkpoints)."
    )
    save_interval: int | None = Field(
        None, ge=1, description="Iterations between saves (None: only at the end/on signal)."
    )
    keep_last: int | None = Field(None, ge=1, description="Keep only the newest N checkpoints.")
    async_save: bool = Field(False, description="Write checkpoints in the background where supported.")
    load: bool = Field(True, description="Auto-resume from the latest checkpoint in dir.")
    save_on_exit: bool = Field(True, description="Save when the run ends or is signalled (SIGTERM/SIGUSR2).")
    fully_reshardable: bool = Field(
        False,
        description="Distributed optimizer only (the plain optimizer's state always reshards): write its state "
        "in Megatron-LM's fully_reshardable layout (--dist-ckpt-optim-fully-reshardable: one tensor per "
        "parameter, so a resume may change parallel.tp, parallel.pp and the data-parallel size). Costs host "
        "memory at save: every rank gathers "
        "the optimizer state of its whole data-parallel group (12 bytes per parameter of its tp/pp shard). "
        "false (Megatron-LM's default) writes dp_reshardable (each rank's flat buffers: a resume may change "
        "only the data-parallel size). To reshard such a checkpoint, resume once at its layout with this set "
        "and save. Loading follows what the checkpoint records, either way.",
    )


class TrainSpec(Section):
    """The optimisation loop."""

    micro_batch_size: int = Field(1, ge=1, description="Sequences per forward pass per data-parallel rank.")
    global_batch_size: int = Field(8, ge=1, description="Sequences per optimizer step across all ranks.")
    iterations: int = Field(100, ge=1, description="Optimizer steps to train for (train_iters).")
    lr: float = Field(3e-4, gt=0, description="Peak learning rate.")
    min_lr: float = Field(3e-5, ge=0, description="Learning rate at the end of decay.")
    lr_warmup_iters: int = Field(0, ge=0, description="Linear warmup steps.")
    lr_decay_style: Literal["cosine", "linear", "constant"] = "cosine"
    lr_decay_iters: int | None = Field(None, ge=1, description="Decay horizon (default: iterations).")
    weight_decay: float = Field(0.1, ge=0)
    adam_beta1: float = Field(0.9, gt=0, lt=1)
    adam_beta2: float = Field(0.95, gt=0, lt=1)
    adam_eps: float = Field(1e-8, gt=0)
    clip_grad: float = Field(1.0, ge=0, description="Global grad-norm clip; 0 disables.")
    precision: Literal["fp32", "bf16", "fp16", "fp8"] = Field("bf16", description="fp8 needs Transformer Engine.")
    initial_loss_scale: float = Field(2.0**16, gt=0, description="fp16 only: starting dynamic loss scale.")
    seed: int = Field(1234, ge=0, le=2**31 - 1, description="numpy takes 32-bit seeds and Megatron adds rank "
                      "offsets: at most 2**31 - 1.")
    recompute: Literal["none", "selective", "full"] = Field("none", description="Activation recomputation.")
    recompute_num_layers: int = Field(1, ge=1, description="full recompute: layers per recompute block.")
    log_interval: int = Field(
        1, ge=1, description="Iterations between log lines (also how often triggers are checked)."
    )
    eval_interval: int | None = Field(None, ge=1, description="Iterations between validation passes.")
    eval_iters: int = Field(2, ge=1, description="Validation batches per evaluation.")
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    init_from: str | None = Field(
        None,
        description="Start a new run from these weights: an mtk or Megatron-LM checkpoint dir (with its tracker,"
        " or one iter_N/release dir) at any TP/PP layout. Optimizer, LR schedule and data position start fresh;"
        " ignored once the run has its own checkpoint (then it resumes).",
    )
    tensorboard: bool = Field(True, description="Write TensorBoard scalars to <run dir>/tensorboard.")
