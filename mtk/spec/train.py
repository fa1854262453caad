"""``train``: batch sizes, schedule, precision, checkpointing and logging."""

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.json_schema import JsonDict

from mtk.batch_schedule import EXACT_TOKENS, parse_steps

from .base import Section

# The mark of a ``train`` field the megatron-core check (mtk.launcher.megatron_check: the LR scheduler, the
# TransformerConfig, the device plan, the engine preflight) reads. Its cached verdict is keyed on exactly the marked
# fields (:func:`read_by_check`, used by mtk.launcher.megatron_cache): a field the check starts reading gets the
# mark here, and tests/integration/launcher/test_megatron_check_cache.py fails naming a read field without it.
READ_BY_CHECK: JsonDict = {"megatron_check": True}


class CheckpointSpec(Section):
    """Where and how often to save. Resume is automatic from ``dir``'s latest-iteration tracker."""

    dir: str | None = Field(
        None, description="Checkpoint directory on shared storage (default: <runs_dir>/<name>/checkpoints)."
    )
    save_interval: int | None = Field(
        None, ge=1, description="Iterations between saves (None: only at the end/on signal)."
    )
    keep_last: int | None = Field(None, ge=1, description="Keep only the newest N checkpoints.")
    async_save: bool = Field(False, description="Write checkpoints in the background where supported.")
    assume_constant_structure: bool = Field(
        True, description="Keep megatron-core's save plans from save to save and check the sharding on the first "
        "save only (Megatron-LM's --ckpt-assume-constant-structure). Before each reuse every rank compares its state "
        "dict's keys, shapes, dtypes and sharding with the plans' (one all-reduce): a changed one (Adam's state "
        "appearing after the first save) is planned and checked anew. false re-plans and re-checks every save: an "
        "all-gather of every rank's shard metadata to every rank, minutes per save at thousands of ranks "
        "(benchmarks/scale_checkpoint.py).")
    fully_parallel_save: bool = Field(
        False, description="Spread the writing of replicated shards (the model's weights, the same on every "
        "data-parallel rank) over all data-parallel ranks (Megatron-LM's --ckpt-fully-parallel-save). Without it "
        "the first data-parallel rank's node writes every weight: at hundreds of nodes that one node's write bounds "
        "the save. Its first save exchanges shard metadata within each data-parallel group (cached after that with "
        "assume_constant_structure).")
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


class Fp8Spec(Section):
    """FP8 GEMMs through Transformer Engine, used when ``train.precision`` is fp8 (setting any field with another
    precision is refused). Defaults are NVIDIA's H100 recipe (Megatron-LM ``examples/llama/
    train_llama3_8b_h100_fp8.sh``, core_r0.19.0), not Megatron-LM's argument defaults (history 1, most_recent)."""

    format: Literal["hybrid", "e4m3"] = Field(
        "hybrid", description="hybrid: E4M3 forward, E5M2 gradients (--fp8-format); e4m3: E4M3 everywhere.")
    recipe: Literal["delayed", "tensorwise"] = Field(
        "delayed", description="Scaling recipe (--fp8-recipe): delayed uses an amax history; tensorwise the "
        "current tensor's amax.")
    amax_history_len: int = Field(
        1024, ge=1, description="delayed recipe: steps of amax history kept per tensor (--fp8-amax-history-len).")
    amax_compute_algo: Literal["max", "most_recent"] = Field(
        "max", description="delayed recipe: scale from the history's max or its newest amax (--fp8-amax-compute-algo).")
    param_gather: bool | None = Field(
        None, description="Keep FP8 copies of the weights and all-gather them in FP8 (--fp8-param-gather; half the "
        "all-gather bytes). Needs parallel.distributed_optimizer and the delayed recipe. Default: on when both hold.")


class BatchStep(Section):
    """One step of ``train.batch_size_schedule``: from ``tokens`` trained on, each iteration trains
    ``global_batch_size`` sequences."""

    tokens: int = Field(..., ge=0, le=EXACT_TOKENS, description="Tokens trained before this step applies; "
                        "counted in whole samples (tokens ÷ model.seq_length, rounded down), as Megatron-LM does.")
    global_batch_size: int = Field(..., ge=1, description="Sequences per optimizer step from here on.")


class TrainSpec(Section):
    """The optimisation loop."""

    @model_validator(mode="before")
    @classmethod
    def _final_batch_from_the_schedule(cls, data: Any) -> Any:
        """With a batch-size schedule left without ``global_batch_size``, the global batch is the schedule's last."""
        if not isinstance(data, dict) or data.get("global_batch_size") is not None:
            return data
        steps = data.get("batch_size_schedule")
        try:
            last = _steps(steps)[-1] if steps else None
        except (ValueError, TypeError, AttributeError, KeyError, IndexError):
            return data  # the field's own validation says what is wrong
        if last is None:
            return data
        batch = last.global_batch_size if isinstance(last, BatchStep) else last.get("global_batch_size")
        return {**data, "global_batch_size": batch} if batch is not None else data

    @field_validator("batch_size_schedule", mode="before")
    @classmethod
    def _megatron_text(cls, value: Any) -> Any:
        """Megatron-LM's own spelling (``"0:384 200B:768"``) is read as its parser reads it; steps are sorted."""
        return _steps(value) if value not in (None, []) else None

    @property
    def fp8_settings(self) -> Fp8Spec:
        """``fp8`` as given, else the H100-recipe defaults."""
        return self.fp8 or Fp8Spec()

    def micro_batches(self, data_parallel: int) -> int:
        """Micro-batches per optimizer step on each data-parallel rank: global ÷ (micro × DP) (the checks refuse a
        global batch that does not divide)."""
        return self.global_batch_size // (self.micro_batch_size * data_parallel)

    micro_batch_size: int = Field(1, ge=1, description="Sequences per forward pass per data-parallel rank.")
    global_batch_size: int = Field(8, ge=1, description="Sequences per optimizer step across all ranks (with "
                                   "batch_size_schedule: its last step's batch, which it defaults to).",
                                   json_schema_extra=READ_BY_CHECK)
    batch_size_schedule: list[BatchStep] | None = Field(
        None, description="A global batch that grows with the tokens trained (Megatron-LM's "
        "--step-batch-size-schedule): steps of {tokens, global_batch_size}, the first at 0 tokens, or Megatron-LM's "
        "string '0:384 200B:768' (K/M/B/T suffixes). Each iteration trains the batch of the step reached by the "
        "samples consumed before it (tokens ÷ model.seq_length, rounded down); its samples, the learning-rate "
        "schedule (counted in samples, as Megatron-LM counts them), a resume and the logged throughput follow "
        "it. train.iterations, lr_warmup_iters and lr_decay_iters stay iterations: their samples are the ones "
        "those iterations consume under the schedule. Every step's batch must divide by micro_batch_size × "
        "the data-parallel size. Unset: every iteration trains global_batch_size.",
        json_schema_extra=READ_BY_CHECK)
    iterations: int = Field(100, ge=1, description="Optimizer steps to train for (train_iters).",
                            json_schema_extra=READ_BY_CHECK)
    lr: float = Field(3e-4, gt=0, description="Peak learning rate.", json_schema_extra=READ_BY_CHECK)
    min_lr: float = Field(3e-5, ge=0, description="Learning rate at the end of decay.", json_schema_extra=READ_BY_CHECK)
    lr_warmup_iters: int = Field(0, ge=0, description="Linear warmup steps.", json_schema_extra=READ_BY_CHECK)
    lr_warmup_fraction: float | None = Field(
        None, gt=0, lt=1, description="Linear warmup as a fraction of the decay horizon (--lr-warmup-fraction): "
        "fraction × (lr_decay_iters or iterations) steps, as Megatron-LM computes them (not rounded to whole "
        "iterations). Instead of lr_warmup_iters.", json_schema_extra=READ_BY_CHECK)
    lr_decay_style: Literal["cosine", "linear", "constant"] = Field("cosine", json_schema_extra=READ_BY_CHECK)
    lr_decay_iters: int | None = Field(None, ge=1, description="Decay horizon (default: iterations).",
                                       json_schema_extra=READ_BY_CHECK)
    lr_schedule_on_resume: Literal["keep", "replan"] = Field(
        "keep", description="When a resumed checkpoint's LR schedule (lr, min_lr, warmup, decay iterations, style) "
        "differs from this spec's — e.g. train.iterations raised to train further: keep continues the checkpoint's "
        "schedule (Megatron-LM's --use-checkpoint-opt_param-scheduler; past its decay horizon the LR stays at its "
        "min_lr, so a converged run goes on without an LR jump); replan applies this spec's schedule at the "
        "checkpoint's step (--override-opt_param-scheduler; extending a finished cosine run raises the LR again). "
        "Either way the resume logs one line with both schedules and the next iteration's LR. Default keep: "
        "Megatron-LM refuses a mismatch unless told, and a silent LR jump on a trained model is the classic loss "
        "spike.", json_schema_extra=READ_BY_CHECK)
    weight_decay: float = Field(0.1, ge=0, json_schema_extra=READ_BY_CHECK)
    adam_beta1: float = Field(0.9, gt=0, lt=1)
    adam_beta2: float = Field(0.95, gt=0, lt=1)
    adam_eps: float = Field(1e-8, gt=0)
    clip_grad: float = Field(1.0, ge=0, description="Global grad-norm clip; 0 disables.")
    precision: Literal["fp32", "bf16", "fp16", "fp8"] = Field("bf16", description="fp8 needs Transformer Engine.",
                                                              json_schema_extra=READ_BY_CHECK)
    fp8: Fp8Spec | None = Field(
        None, description="FP8 settings (precision fp8 only; unset: NVIDIA's H100 recipe, see Fp8Spec).",
        json_schema_extra=READ_BY_CHECK)
    grad_reduce_dtype: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="Dtype of the gradient buffers that accumulate micro-batches and are reduced over data "
        "parallel ranks (bf16 = --grad-reduce-in-bf16: half the reduce bytes, as NVIDIA's H100 recipe). Needs "
        "precision bf16 or fp8. auto: bf16 on GPU with bf16/fp8, fp32 otherwise (CPU runs keep fp32).",
        json_schema_extra=READ_BY_CHECK)
    cross_entropy_fusion: bool | None = Field(
        None, description="megatron-core's fused vocab-parallel cross entropy (--cross-entropy-loss-fusion, native "
        "implementation). Default: on GPU, off on CPU.", json_schema_extra=READ_BY_CHECK)
    manual_gc: bool = Field(
        True, description="Disable Python's automatic garbage collector and collect at the same points on every "
        "rank (--manual-gc: at the start, around evaluation, and every manual_gc_interval steps), so GC pauses "
        "do not make one rank straggle.")
    manual_gc_interval: int = Field(
        0, ge=0, description="manual_gc: also collect every N iterations (0: only at the start and around evaluation).")
    decoupled_lr: float | None = Field(
        None, gt=0, description="Peak LR of the embedding and output layers (--decoupled-lr; NVIDIA's Llama-3-8B "
        "recipe: 5e-4 with lr 1.5e-4). None: they use lr.")
    decoupled_min_lr: float | None = Field(
        None, ge=0, description="Final LR of the embedding and output layers (--decoupled-min-lr); needs decoupled_lr.")
    per_token_loss: bool = Field(
        False, description="Average the loss over all tokens of the global batch instead of per micro-batch "
        "(--calculate-per-token-loss): micro-batches with fewer loss tokens weigh less.",
        json_schema_extra=READ_BY_CHECK)
    check_nan_in_grad: bool | None = Field(
        None, description="Check every rank's gradients for NaN/Inf before they are reduced and stop the run with an "
        "error (Megatron-LM's --check-for-nan-in-loss-and-grad). Default: on, except with fp16, whose dynamic loss "
        "scaler treats an overflow as a skipped step (as Megatron-LM). Off: a NaN step only shows in the grad norm.",
        json_schema_extra=READ_BY_CHECK)
    initial_loss_scale: float = Field(2.0**16, gt=0, description="fp16 only: starting dynamic loss scale.")
    seed: int = Field(1234, ge=0, le=2**31 - 1, description="numpy takes 32-bit seeds and Megatron adds rank "
                      "offsets: at most 2**31 - 1.")
    recompute: Literal["none", "selective", "full"] = Field("none", description="Activation recomputation.",
                                                            json_schema_extra=READ_BY_CHECK)
    recompute_num_layers: int = Field(1, ge=1, description="full recompute: layers per recompute block.",
                                      json_schema_extra=READ_BY_CHECK)
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


def _steps(value: Any) -> list[Any]:
    """The schedule's steps, from Megatron-LM's string or a list, sorted by tokens (Megatron-LM sorts them)."""
    if isinstance(value, str):
        return [{"tokens": t, "global_batch_size": b} for t, b in parse_steps(value)]
    if not isinstance(value, list):
        return value
    tokens: list[int] = []
    for step in value:
        t = step.tokens if isinstance(step, BatchStep) else step.get("tokens") if isinstance(step, dict) else None
        if not isinstance(t, int) or isinstance(t, bool):
            return value  # the steps' own validation names what is wrong
        tokens.append(t)
    return [s for _, s in sorted(zip(tokens, value, strict=True), key=lambda pair: pair[0])]


def read_by_check() -> tuple[str, ...]:
    """The ``train`` fields marked :data:`READ_BY_CHECK`, in declaration order."""
    return tuple(name for name, info in TrainSpec.model_fields.items()
                 if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("megatron_check"))
