"""The rows: every Megatron-LM flag mtk knows, the megatron-core arguments Megatron-LM derives without a flag, the
flags mtk decides in code and the spec fields Megatron-LM has no flag for."""

from __future__ import annotations

from typing import Any

from mtk.batch_schedule import BatchSchedule, megatron_text

from .row import CALCULATOR, DDP, GPT, GROUPS, LOCAL_SPEC, OC, SCHEDULER, SET, TC, TE_SPEC, Derived, Flag


def _moe(job: Any) -> bool:
    return bool(job.model.moe.num_experts)


def _not(value: Any, _job: Any) -> bool:
    return not value


def in_samples(iterations: Any, job: Any) -> Any:
    """Megatron-LM's scheduler counts samples: the samples ``iterations`` consume — iterations × the global batch, or
    under a batch-size schedule the sum of its batches."""
    return BatchSchedule.of(job).samples(iterations)


def _stepped(job: Any) -> bool:
    return bool(job.train.batch_size_schedule)


def _stepped_args(args: Any) -> bool:
    """Whether a checkpoint's args record a batch-size schedule (its LR horizons are then in samples)."""
    return bool(getattr(args, "step_batch_size_schedule", None))


def _schedule_text(job: Any) -> str | None:
    """train.batch_size_schedule as Megatron-LM's --step-batch-size-schedule value (tokens, whole numbers)."""
    steps = job.train.batch_size_schedule
    return megatron_text([(s.tokens, s.global_batch_size) for s in steps]) if steps else None


def _recorded_global_batch(job: Any) -> int:
    """Megatron-LM's args.global_batch_size: the flag's, or — under a schedule, where it refuses the flag —
    micro batch × data parallel (its validate_args default)."""
    t, p = job.train, job.parallel
    if not t.batch_size_schedule:
        return t.global_batch_size
    return t.micro_batch_size * (job.cluster.world_size // (p.tp * p.pp * p.cp))


def _decay_iters(job: Any) -> int:
    return job.train.lr_decay_iters or job.train.iterations


def _fraction_of_decay(fraction: float, job: Any) -> float:
    """Megatron-LM's ``lr_warmup_fraction * lr_decay_steps`` (samples, a float)."""
    return fraction * in_samples(_decay_iters(job), job)


def _warmup_iters(scheduler: Any, gbs: int, args: Any) -> int:
    """A schedule's warmup in iterations; 0 where the args give it as a fraction (Megatron-LM takes one of them) or
    in samples (a batch-size schedule)."""
    if getattr(args, "lr_warmup_fraction", None) or _stepped_args(args):
        return 0
    return scheduler.lr_warmup_steps // gbs


def _warmup_samples(scheduler: Any, gbs: int, args: Any) -> int:
    """A schedule's warmup in samples, where the args count in samples (a batch-size schedule) and not as a
    fraction; else Megatron-LM's 0."""
    if getattr(args, "lr_warmup_fraction", None) or not _stepped_args(args):
        return 0
    return int(scheduler.lr_warmup_steps)


def _warmup_fraction(scheduler: Any, gbs: int, args: Any) -> float | None:
    """A schedule's warmup as a fraction of its decay horizon, where the args give it so."""
    if not getattr(args, "lr_warmup_fraction", None):
        return None
    return scheduler.lr_warmup_steps / scheduler.lr_decay_steps


def _tokenizer_file(job: Any, path: str | None) -> str | None:
    return None if path is None else job.data.resolve(path)


def _tokenizer_model(job: Any) -> str | None:
    """HuggingFaceTokenizer: Megatron-LM loads it with AutoTokenizer, from the folder holding tokenizer.json."""
    model = _tokenizer_file(job, job.data.tokenizer.model)
    if model is not None and job.data.tokenizer.type == "HuggingFaceTokenizer":
        return model.rpartition("/")[0] or "."
    return model


CHECKPOINT_FORMAT = "torch_dist"  # megatron-core's distributed checkpoint, the one format mtk writes
PRECISION_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}  # fp8 trains on bf16 weights
LOW = ("bf16", "fp8")
# rows for a constant global batch, and for a batch-size schedule (Megatron-LM then counts in samples)
CONSTANT = (("train.batch_size_schedule", (None,)),)
STEPPED = (("train.batch_size_schedule", SET),)
NOT_FP16 = ("fp32", "bf16", "fp8")

FLAGS: tuple[Flag, ...] = (
    # --- model
    Flag("--num-layers", "model.num_layers", (f"{TC}.num_layers",)),
    Flag("--hidden-size", "model.hidden_size", (f"{TC}.hidden_size",)),
    Flag("--ffn-hidden-size", "model.ffn_hidden_size", (f"{TC}.ffn_hidden_size",), read=lambda j: j.model.ffn,
         why="unset: 4 × hidden_size"),
    Flag("--num-attention-heads", "model.num_attention_heads", (f"{TC}.num_attention_heads",)),
    Flag("--kv-channels", read=lambda j: j.model.hidden_size // j.model.num_attention_heads, runtime="head_dim",
         derived_from="model.hidden_size", why="hidden_size ÷ num_attention_heads"),
    Flag("--group-query-attention", form="true", read=lambda j: j.model.query_groups != j.model.num_attention_heads,
         derived_from="model.num_query_groups", why="on when model.num_query_groups differs from the heads"),
    Flag("--num-query-groups", "model.num_query_groups", (f"{TC}.num_query_groups",),
         read=lambda j: j.model.query_groups,
         why="unset: the heads (MHA); Megatron-LM reads it only with --group-query-attention"),
    Flag("--seq-length", "model.seq_length", (f"{CALCULATOR}.seq_length",)),
    Flag("--max-position-embeddings", "model.max_position_embeddings", (f"{GPT}.max_sequence_length",),
         read=lambda j: j.model.max_positions, why="unset: seq_length"),
    Flag("--position-embedding-type", "model.position_embedding", (f"{GPT}.position_embedding_type",)),
    Flag("--no-position-embedding", form="false", dest="add_position_embedding",
         read=lambda j: j.model.position_embedding != "rope", derived_from="model.position_embedding",
         why="with rope (Megatron-LM's default adds a learned table)"),
    Flag("--use-rotary-position-embeddings", "model.position_embedding", form="when", when=("rope",),
         why="Megatron-LM's older spelling of --position-embedding-type rope"),
    Flag("--rotary-base", "model.rotary_base", (f"{GPT}.rotary_base",), read=lambda j: int(j.model.rotary_base),
         why="an integer in Megatron-LM"),
    Flag("--rotary-percent", core=(f"{GPT}.rotary_percent",), fixed=1.0, derived_from="model.position_embedding",
         why="RoPE on the whole head"),
    Flag("--rotary-interleaved", core=(f"{TC}.rotary_interleaved",), form="true", fixed=False,
         derived_from="model.position_embedding", why="RoPE rotates the two halves of the head"),
    Flag("--normalization", "model.normalization", (f"{TC}.normalization", f"{LOCAL_SPEC}.normalization")),
    Flag("--norm-epsilon", "model.norm_epsilon", (f"{TC}.layernorm_epsilon",), dest="layernorm_epsilon"),
    Flag("--swiglu", "model.activation", (f"{TC}.gated_linear_unit",), form="when", when=("swiglu",),
         absent="gelu", why="swiglu: gated_linear_unit with activation_func silu; gelu otherwise"),
    Flag("--squared-relu", form="true", fixed=False, derived_from="model.activation"),
    Flag("--apply-layernorm-1p", "model.layernorm_1p", (f"{TC}.layernorm_zero_centered_gamma",), form="true",
         dest="layernorm_zero_centered_gamma", aliases=("apply_layernorm_1p",),
         why="megatron-core 0.19 stores it as layernorm_zero_centered_gamma, older Megatron-LM as "
             "apply_layernorm_1p: the checkpoint records both"),
    Flag("--attention-softmax-in-fp32", "model.attention_softmax_in_fp32", (f"{TC}.attention_softmax_in_fp32",),
         form="true"),
    Flag("--disable-bias-linear", "model.add_bias_linear", (f"{TC}.add_bias_linear",), form="false",
         dest="add_bias_linear"),
    Flag("--add-qkv-bias", form="true", read=lambda j: j.model.add_bias_linear, written="record",
         derived_from="model.add_bias_linear", why="Megatron-LM sets it from add_bias_linear"),
    Flag("--apply-query-key-layer-scaling", form="true", fixed=False, derived_from="model.attention_softmax_in_fp32"),
    Flag("--untie-embeddings-and-output-weights", "model.untie_embeddings",
         (f"{GPT}.share_embeddings_and_output_weights",), form="true", to_core=_not,
         why="GPTModel's share_embeddings_and_output_weights is its negation"),
    Flag("--hidden-dropout", "model.hidden_dropout", (f"{TC}.hidden_dropout",)),
    Flag("--attention-dropout", "model.attention_dropout", (f"{TC}.attention_dropout",)),
    Flag("--init-method-std", "model.init_method_std", (f"{TC}.init_method_std",)),
    Flag("--make-vocab-size-divisible-by", "model.make_vocab_size_divisible_by"),
    Flag("--vocab-size", "model.vocab_size", runtime="vocab_size", needs=(("data.tokenizer.type", ("NullTokenizer",)),),
         why="the vocabulary the model was built with (written for mock data: other tokenizers bring their own)"),
    Flag("--padded-vocab-size", written="record", runtime="padded_vocab_size", derived_from="model.vocab_size",
         why="the built vocabulary, padded to make_vocab_size_divisible_by × tp"),
    # --- mixture of experts
    Flag("--num-experts", "model.moe.num_experts",
         (f"{TC}.num_moe_experts", f"{LOCAL_SPEC}.num_experts", f"{TE_SPEC}.num_experts"),
         read=lambda j: j.model.moe.num_experts or None, only="num_experts", why="0 (dense) is Megatron-LM's None"),
    Flag("--moe-ffn-hidden-size", "model.moe.ffn_hidden_size", (f"{TC}.moe_ffn_hidden_size",), only="num_experts",
         read=lambda j: (j.model.moe.ffn_hidden_size or j.model.ffn) if _moe(j) else None, why="unset: the dense FFN"),
    Flag("--moe-router-topk", "model.moe.router_topk", (f"{TC}.moe_router_topk",), only="num_experts"),
    Flag("--moe-aux-loss-coeff", "model.moe.aux_loss_coeff", (f"{TC}.moe_aux_loss_coeff",), only="num_experts",
         absent=0.0),
    Flag("--moe-expert-capacity-factor", "model.moe.capacity_factor", (f"{TC}.moe_expert_capacity_factor",),
         only="num_experts", why="unset: dropless"),
    Flag("--moe-router-load-balancing-type", core=(f"{TC}.moe_router_load_balancing_type",), fixed="aux_loss",
         only="num_experts", derived_from="model.moe.num_experts"),
    Flag("--moe-token-dispatcher-type", core=(f"{TC}.moe_token_dispatcher_type",), fixed="alltoall",
         only="num_experts", derived_from="model.moe.num_experts"),
    Flag("--moe-grouped-gemm", core=(f"{TC}.moe_grouped_gemm", f"{LOCAL_SPEC}.moe_grouped_gemm",
                                     f"{TE_SPEC}.moe_grouped_gemm"), form="true", fixed=False, only="num_experts",
         derived_from="model.moe.num_experts"),
    Flag("--moe-pad-expert-input-to-capacity", core=(f"{TC}.moe_pad_expert_input_to_capacity",), form="true",
         fixed=False, written="", only="num_experts", derived_from="model.moe.capacity_factor"),
    Flag("--moe-layer-freq", fixed=1, written="record", only="num_experts", derived_from="model.moe.num_experts",
         why="every layer is an MoE layer"),
    # --- parallelism
    Flag("--tensor-model-parallel-size", "parallel.tp",
         (f"{TC}.tensor_model_parallel_size", f"{GROUPS}.tensor_model_parallel_size")),
    Flag("--pipeline-model-parallel-size", "parallel.pp",
         (f"{TC}.pipeline_model_parallel_size", f"{GROUPS}.pipeline_model_parallel_size")),
    Flag("--num-virtual-stages-per-pipeline-rank", "parallel.virtual_pp",
         (f"{TC}.virtual_pipeline_model_parallel_size", f"{GROUPS}.virtual_pipeline_model_parallel_size"),
         dest="virtual_pipeline_model_parallel_size"),
    Flag("--context-parallel-size", "parallel.cp",
         (f"{TC}.context_parallel_size", f"{GROUPS}.context_parallel_size")),
    Flag("--expert-model-parallel-size", "parallel.ep",
         (f"{TC}.expert_model_parallel_size", f"{GROUPS}.expert_model_parallel_size"),
         read=lambda j: j.parallel.ep if _moe(j) else 1, why="1 for a dense model"),
    Flag("--expert-tensor-parallel-size", read=lambda j: j.parallel.tp, written="", derived_from="parallel.tp",
         why="parallel.tp (megatron-core's default)"),
    Flag("--sequence-parallel", "parallel.sequence_parallel", (f"{TC}.sequence_parallel",), form="true"),
    Flag("--use-distributed-optimizer", "parallel.distributed_optimizer",
         (f"{OC}.use_distributed_optimizer", f"{DDP}.use_distributed_optimizer"), form="true"),
    Flag("--overlap-grad-reduce", core=(f"{DDP}.overlap_grad_reduce",), form="true", written="",
         resolve=lambda j, p: p.overlap_grad_reduce, why="the device plan (on with a GPU and data parallel > 1)"),
    Flag("--overlap-param-gather", core=(f"{DDP}.overlap_param_gather", f"{OC}.overlap_param_gather"), form="true",
         written="", resolve=lambda j, p: p.overlap_param_gather,
         why="the device plan (with the distributed optimizer on a GPU)"),
    Flag("--no-align-param-gather", core=(f"{DDP}.align_param_gather",), form="false", dest="align_param_gather",
         written="", resolve=lambda j, p: p.align_param_gather,
         why="the device plan (overlapped param gather with pipeline parallelism)"),
    Flag("--ddp-bucket-size", core=(f"{DDP}.bucket_size",), written="",
         why="megatron-core's own (one bucket without overlap)"),
    Flag("--distributed-timeout-minutes", core=(f"{GROUPS}.distributed_timeout_minutes",), written="",
         read=lambda j: max(1, -(-j.cluster.pg_timeout_s // 60)), derived_from="cluster.pg_timeout_s",
         why="cluster.pg_timeout_s, in whole minutes"),
    # --- kernels, as the device plan chooses them
    Flag("--use-cpu-initialization", core=(f"{TC}.use_cpu_initialization",), form="true", written="",
         resolve=lambda j, p: p.device == "cpu", why="on CPU"),
    Flag("--no-gradient-accumulation-fusion", core=(f"{TC}.gradient_accumulation_fusion",), form="false",
         dest="gradient_accumulation_fusion", written="", resolve=lambda j, p: p.gradient_accumulation_fusion,
         why="the device plan's fusions"),
    Flag("--no-bias-gelu-fusion", core=(f"{TC}.bias_activation_fusion",), form="false", dest="bias_gelu_fusion",
         written="", needs=(("model.activation", ("gelu",)),), resolve=lambda j, p: p.bias_activation_fusion,
         why="the device plan's fusions"),
    Flag("--no-bias-swiglu-fusion", core=(f"{TC}.bias_activation_fusion",), form="false", dest="bias_swiglu_fusion",
         written="", needs=(("model.activation", ("swiglu",)),), resolve=lambda j, p: p.bias_activation_fusion,
         why="the device plan's fusions"),
    Flag("--no-bias-dropout-fusion", core=(f"{TC}.bias_dropout_fusion",), form="false", dest="bias_dropout_fusion",
         written="", resolve=lambda j, p: p.bias_dropout_fusion, why="the device plan's fusions"),
    Flag("--no-masked-softmax-fusion", core=(f"{TC}.masked_softmax_fusion",), form="false",
         dest="masked_softmax_fusion", written="", resolve=lambda j, p: p.masked_softmax_fusion,
         why="the device plan's fusions"),
    Flag("--no-rope-fusion", core=(f"{TC}.apply_rope_fusion",), form="false", dest="apply_rope_fusion", written="",
         resolve=lambda j, p: p.apply_rope_fusion, why="the device plan's fusions"),
    Flag("--no-persist-layer-norm", core=(f"{TC}.persist_layer_norm",), form="false", dest="no_persist_layer_norm",
         written="", resolve=lambda j, p: p.persist_layer_norm,
         why="the device plan's fusions (Megatron-LM's attribute is the negation)"),
    Flag("--cuda-graph-modules", core=(f"{TC}.cuda_graph_modules",), read=lambda j: [], written="",
         why="none (megatron-core 0.19 warns that its default 'full' is deprecated)"),
    # --- schedule and optimizer
    Flag("--micro-batch-size", "train.micro_batch_size", (f"{CALCULATOR}.micro_batch_size",)),
    Flag("--global-batch-size", "train.global_batch_size", needs=CONSTANT, read=_recorded_global_batch,
         why="under train.batch_size_schedule (whose last step is the final batch) Megatron-LM refuses the flag: "
             "recorded as its micro batch × data parallel there"),
    Flag("--step-batch-size-schedule", "train.batch_size_schedule", (f"{CALCULATOR}.schedule",),
         needs=STEPPED, read=_schedule_text,
         why="thresholds in tokens (÷ --seq-length: samples); the run is then counted in samples (--train-samples, "
             "--lr-decay-samples, --lr-warmup-samples)"),
    Flag("--rampup-batch-size", "train.batch_size_schedule", written="", needs=STEPPED,
         why="START INCREMENT RAMP_SAMPLES: megatron-core ≤ 0.17 ramps, 0.18 on ignores it; mtk import refuses it "
             "with the --step-batch-size-schedule of the ramp (or --allow-dropped: the constant batch); never written"),
    Flag("--train-iters", "train.iterations", needs=CONSTANT,
         why="--train-samples under train.batch_size_schedule"),
    Flag("--train-samples", "train.iterations", needs=STEPPED,
         read=lambda j: in_samples(j.train.iterations, j) if _stepped(j) else None,
         why="the samples train.iterations consume (Megatron-LM trains the fewest iterations that reach them); "
             "without a schedule an import reads it ÷ the global batch"),
    Flag("--lr", "train.lr", (f"{OC}.lr", f"{SCHEDULER}.max_lr")),
    Flag("--min-lr", "train.min_lr", (f"{OC}.min_lr", f"{SCHEDULER}.min_lr"), absent=0.0),
    Flag("--lr-decay-style", "train.lr_decay_style", (f"{SCHEDULER}.lr_decay_style",), absent="linear"),
    Flag("--lr-warmup-iters", "train.lr_warmup_iters", (f"{SCHEDULER}.lr_warmup_steps",), to_core=in_samples,
         read=lambda j: 0 if _stepped(j) else j.train.lr_warmup_iters,
         needs=(("train.lr_warmup_fraction", (None,)), *CONSTANT), from_schedule=_warmup_iters),
    Flag("--lr-warmup-fraction", "train.lr_warmup_fraction", (f"{SCHEDULER}.lr_warmup_steps",),
         only="lr_warmup_fraction", to_core=_fraction_of_decay, from_schedule=_warmup_fraction,
         why="warmup steps: the fraction × the decay horizon in samples, as Megatron-LM computes them"),
    Flag("--lr-warmup-samples", "train.lr_warmup_iters", (f"{SCHEDULER}.lr_warmup_steps",),
         read=lambda j: in_samples(j.train.lr_warmup_iters, j) if _stepped(j) else 0,
         needs=(("train.lr_warmup_fraction", (None,)), *STEPPED),
         from_schedule=_warmup_samples,
         why="the samples the warmup iterations consume; without a schedule an import reads it ÷ the global batch"),
    Flag("--lr-decay-iters", "train.lr_decay_iters", (f"{SCHEDULER}.lr_decay_steps",), to_core=in_samples,
         needs=CONSTANT, from_schedule=lambda s, gbs, a: None if _stepped_args(a) else s.lr_decay_steps // gbs,
         read=lambda j: None if _stepped(j) else _decay_iters(j), why="unset: train.iterations"),
    Flag("--lr-decay-samples", "train.lr_decay_iters", (f"{SCHEDULER}.lr_decay_steps",),
         read=lambda j: in_samples(_decay_iters(j), j) if _stepped(j) else None,
         needs=STEPPED,
         from_schedule=lambda s, gbs, a: int(s.lr_decay_steps) if _stepped_args(a) else None,
         why="the samples the decay iterations consume (unset: those of train.iterations); without a schedule an "
             "import reads it ÷ the global batch"),
    Flag("--lr-warmup-init", core=(f"{SCHEDULER}.init_lr",), fixed=0.0, written="", derived_from="train.lr",
         why="warmup starts from 0"),
    Flag("--weight-decay", "train.weight_decay", (f"{OC}.weight_decay",), absent=0.01),
    Flag("--start-weight-decay", core=(f"{SCHEDULER}.start_wd",), read=lambda j: j.train.weight_decay,
         written="record", derived_from="train.weight_decay",
         why="train.weight_decay (a constant weight decay: Megatron-LM refuses the flag with it)"),
    Flag("--end-weight-decay", core=(f"{SCHEDULER}.end_wd",), read=lambda j: j.train.weight_decay, written="record",
         derived_from="train.weight_decay", why="train.weight_decay (as --start-weight-decay)"),
    Flag("--weight-decay-incr-style", core=(f"{SCHEDULER}.wd_incr_style",), fixed="constant", written="record",
         derived_from="train.weight_decay"),
    Flag("--use-checkpoint-opt_param-scheduler", "train.lr_schedule_on_resume",
         (f"{SCHEDULER}.use_checkpoint_opt_param_scheduler",), form="when", when=("keep",), written="",
         why="resume with the checkpoint's schedule"),
    Flag("--override-opt_param-scheduler", "train.lr_schedule_on_resume",
         (f"{SCHEDULER}.override_opt_param_scheduler",), form="when", when=("replan",), written="",
         why="resume with the spec's schedule"),
    Flag("--optimizer", core=(f"{OC}.optimizer",), fixed="adam"),
    Flag("--adam-beta1", "train.adam_beta1", (f"{OC}.adam_beta1",)),
    Flag("--adam-beta2", "train.adam_beta2", (f"{OC}.adam_beta2",), absent=0.999),
    Flag("--adam-eps", "train.adam_eps", (f"{OC}.adam_eps",)),
    Flag("--clip-grad", "train.clip_grad", (f"{OC}.clip_grad",)),
    Flag("--seed", "train.seed"),
    Flag("--decoupled-lr", "train.decoupled_lr", (f"{OC}.decoupled_lr",), written="job"),
    Flag("--decoupled-min-lr", "train.decoupled_min_lr", (f"{OC}.decoupled_min_lr",), written="job"),
    # --- precision
    Flag("--bf16", "train.precision", (f"{TC}.bf16", f"{OC}.bf16"), form="when", when=LOW,
         absent="fp32", why="bf16, or fp8 (whose weights are bf16: the import reads fp8 with --fp8-format)"),
    Flag("--fp16", "train.precision", (f"{TC}.fp16", f"{OC}.fp16"), form="when", when=("fp16",)),
    Flag("--initial-loss-scale", "train.initial_loss_scale", (f"{OC}.initial_loss_scale",), written="job",
         absent=2.0**32, needs=(("train.precision", ("fp16",)),), why="written with fp16"),
    Flag("--fp8-format", "train.fp8.format", (f"{TC}.fp8",), written="job", needs=(("train.precision", ("fp8",)),),
         read=lambda j: j.train.fp8_settings.format, why="sets train.precision fp8"),
    Flag("--fp8-recipe", "train.fp8.recipe", (f"{TC}.fp8_recipe",), written="job",
         needs=(("train.precision", ("fp8",)),), read=lambda j: j.train.fp8_settings.recipe),
    Flag("--fp8-amax-history-len", "train.fp8.amax_history_len", (f"{TC}.fp8_amax_history_len",), written="job",
         needs=(("train.precision", ("fp8",)), ("train.fp8.recipe", ("delayed",))), absent=1,
         read=lambda j: j.train.fp8_settings.amax_history_len, why="delayed recipe"),
    Flag("--fp8-amax-compute-algo", "train.fp8.amax_compute_algo", (f"{TC}.fp8_amax_compute_algo",), written="job",
         needs=(("train.precision", ("fp8",)), ("train.fp8.recipe", ("delayed",))), absent="most_recent",
         read=lambda j: j.train.fp8_settings.amax_compute_algo, why="delayed recipe"),
    Flag("--fp8-param-gather", "train.fp8.param_gather", (f"{TC}.fp8_param", f"{DDP}.fp8_param_gather"), form="true",
         written="job", needs=(("train.precision", ("fp8",)),), resolve=lambda j, p: p.fp8_param, absent=False,
         why="unset: the device plan's choice"),
    Flag("--grad-reduce-in-bf16", "train.grad_reduce_dtype", (f"{DDP}.grad_reduce_in_fp32",), form="when",
         when=("bf16",), written="job", resolve=lambda j, p: not p.grad_reduce_in_fp32, to_core=_not, absent="fp32",
         absent_needs=(("train.precision", LOW),),
         why="grad_reduce_in_fp32 is its negation; auto: the device plan's choice"),
    Flag("--cross-entropy-loss-fusion", "train.cross_entropy_fusion", (f"{TC}.cross_entropy_loss_fusion",),
         form="true", written="job", resolve=lambda j, p: p.cross_entropy_loss_fusion, absent=False,
         why="unset: the device plan's choice"),
    Flag("--cross-entropy-fusion-impl", core=(f"{TC}.cross_entropy_fusion_impl",), fixed="native", written="job",
         only="cross_entropy_loss_fusion", derived_from="train.cross_entropy_fusion"),
    Flag("--calculate-per-token-loss", "train.per_token_loss", (f"{TC}.calculate_per_token_loss",), form="true",
         written="job"),
    Flag("--no-check-for-nan-in-loss-and-grad", "train.check_nan_in_grad", (f"{DDP}.check_for_nan_in_grad",),
         form="false", dest="check_for_nan_in_loss_and_grad", written="job",
         resolve=lambda j, p: p.check_for_nan_in_grad, absent=True, absent_needs=(("train.precision", NOT_FP16),),
         why="unset: the device plan's choice (Megatron-LM turns it off for fp16's dynamic loss scaling)"),
    Flag("--manual-gc", "train.manual_gc", form="true", written="job", absent=False),
    Flag("--manual-gc-interval", "train.manual_gc_interval", written="job", needs=(("train.manual_gc", (True,)),)),
    # --- activation recomputation
    Flag("--recompute-granularity", "train.recompute", (f"{TC}.recompute_granularity",), written="job",
         needs=(("train.recompute", ("selective", "full")),), why="none: the flag is left out"),
    Flag("--recompute-activations", "train.recompute", form="when", when=("selective",), written="",
         why="Megatron-LM's shorthand for --recompute-granularity selective"),
    Flag("--recompute-method", core=(f"{TC}.recompute_method",), fixed="uniform", written="job",
         needs=(("train.recompute", ("full",)),), why="full recompute"),
    Flag("--recompute-num-layers", "train.recompute_num_layers", (f"{TC}.recompute_num_layers",), written="job",
         needs=(("train.recompute", ("full",)),), why="full recompute"),
    # --- evaluation, logging, checkpoints
    Flag("--eval-interval", "train.eval_interval", written="job",
         read=lambda j: j.train.eval_interval or j.train.iterations + 1,
         why="unset (no evaluation): iterations + 1 with --eval-iters 0"),
    Flag("--eval-iters", "train.eval_iters", written="job", absent=100,
         read=lambda j: j.train.eval_iters if j.train.eval_interval else 0,
         why="0: no evaluation (train.eval_interval unset)"),
    Flag("--log-interval", "train.log_interval", written="job", absent=100),
    Flag("--save-interval", "train.checkpoint.save_interval", written="job", why="unset: train.iterations",
         read=lambda j: j.train.checkpoint.save_interval or j.train.iterations),
    Flag("--save", "train.checkpoint.dir", written="job", runtime="checkpoint_root",
         why="unset: <runs_dir>/<name>/checkpoints"),
    Flag("--load", "train.checkpoint.dir", written="job", runtime="checkpoint_root",
         why="mtk resumes from where it saves"),
    Flag("--ckpt-format", fixed=CHECKPOINT_FORMAT, derived_from="train.checkpoint"),
    Flag("--no-save-optim", form="true", fixed=False, runtime="weights_only", derived_from="train.checkpoint",
         why="a converted checkpoint holds weights only"),
    Flag("--no-save-rng", form="true", fixed=False, runtime="weights_only", derived_from="train.checkpoint",
         why="a converted checkpoint holds weights only"),
    Flag("--no-ckpt-fully-parallel-save", form="false", dest="ckpt_fully_parallel_save", fixed=False,
         written="record", derived_from="train.checkpoint.fully_parallel_save",
         why="recorded off; the args file leaves it to Megatron-LM"),
    Flag("--distrib-optim-fully-reshardable-mem-efficient", form="true", fixed=False, written="record",
         derived_from="train.checkpoint.fully_reshardable"),
    Flag("--dist-ckpt-optim-fully-reshardable", "train.checkpoint.fully_reshardable", form="true",
         read=lambda j: j.parallel.distributed_optimizer and j.train.checkpoint.fully_reshardable,
         why="distributed optimizer only"),
    Flag("--data-parallel-random-init", form="true", fixed=False, derived_from="train.seed",
         why="every data-parallel rank starts from the same weights"),
    Flag("--tensorboard-dir", written="", why="<run dir>/tensorboard (train.tensorboard turns it off)"),
    # --- data and tokenizer
    Flag("--data-path", "data.blend", written="job", runtime="blend",
         why="weight prefix pairs (or prefixes of weight 1)"),
    Flag("--mock-data", form="true", written="job", read=lambda j: j.data.mock, runtime="mock",
         derived_from="data.blend", why="no data.blend, data.folders or data.corpus"),
    Flag("--split", "data.split", written="job", runtime="split", absent="969,30,1",
         why="the test share joins valid when no test samples are drawn"),
    Flag("--data-cache-path", "data.cache_dir", written="job", runtime="cache_dir",
         why="unset: <data.dir>/index-cache"),
    Flag("--num-workers", "data.num_workers", written="job"),
    Flag("--tokenizer-type", "data.tokenizer.type"),
    Flag("--vocab-file", "data.tokenizer.vocab_file", written="job",
         needs=(("data.tokenizer.type", ("GPT2BPETokenizer",)),),
         read=lambda j: _tokenizer_file(j, j.data.tokenizer.vocab_file), why="GPT2BPETokenizer"),
    Flag("--merge-file", "data.tokenizer.merge_file", written="job",
         needs=(("data.tokenizer.type", ("GPT2BPETokenizer",)),),
         read=lambda j: _tokenizer_file(j, j.data.tokenizer.merge_file), why="GPT2BPETokenizer"),
    Flag("--tokenizer-model", "data.tokenizer.model", written="job",
         needs=(("data.tokenizer.type", ("HuggingFaceTokenizer", "GPTSentencePieceTokenizer")),),
         read=_tokenizer_model, why="HuggingFaceTokenizer: Megatron-LM takes the folder holding tokenizer.json"),
)

DERIVED: tuple[Derived, ...] = (
    Derived((f"{TC}.params_dtype", f"{TC}.pipeline_dtype", f"{OC}.params_dtype"),
            lambda j: PRECISION_DTYPE.get(j.train.precision, "float32"), "train.precision", kind="dtype",
            why="bf16/fp16 from --bf16/--fp16 (fp8 trains on bf16 weights), else float32"),
    Derived((f"{TC}.activation_func",), lambda j: "silu" if j.model.activation == "swiglu" else "gelu",
            "model.activation", kind="function", why="silu with --swiglu, else gelu"),
    Derived((f"{TC}.deallocate_pipeline_outputs",), lambda j: True, why="as Megatron-LM sets it"),
    Derived((f"{SCHEDULER}.wd_incr_steps",), lambda j: in_samples(j.train.iterations, j), "train.iterations",
            why="--train-iters × the global batch (the samples of --train-samples with a batch-size schedule)"),
    Derived((f"{GPT}.parallel_output",), lambda j: True, why="as Megatron-LM's model provider"),
)

# Flags mtk decides itself from the device plan or its own code, with what decides them, that reach no
# megatron-core argument mtk sets (the import lists them as set by mtk).
SET_BY_MTK: dict[str, str] = {
    "--use-mcore-models": "mtk always builds megatron-core's GPTModel",
    "--transformer-impl": "the device plan: Transformer Engine where it imports, megatron-core's local spec otherwise",
    "--attention-backend": "model.attention_backend (auto, sdpa, unfused, te), chosen with the device plan",
    "--use-flash-attn": "model.attention_backend (auto picks the fused/flash kernels on a GPU)",
    "--distributed-backend": "nccl on a GPU, gloo on CPU",
    "--log-throughput": "mtk's training lines always show throughput",
    "--tensorboard-log-interval": "train.log_interval",
}

TABLE = {f.flag: f for f in FLAGS}
BY_NAME = {f.name: f for f in FLAGS}

# spec fields that have no Megatron-LM flag (mtk's own), so the table's coverage of the spec is checked
SPEC_ONLY: dict[str, str] = {
    "model.preset": "expands to the model fields",
    "model.arch": "a label; the import infers it (llama: rope + swiglu + RMSNorm)",
    "model.attention_backend": "see --attention-backend",
    "train.checkpoint.keep_last": "mtk prunes old checkpoints itself",
    "train.checkpoint.async_save": "mtk's checkpoint writer",
    "train.checkpoint.assume_constant_structure": "Megatron-LM's --ckpt-assume-constant-structure (mtk: on by default)",
    "train.checkpoint.fully_parallel_save": "Megatron-LM's --ckpt-fully-parallel-save",
    "train.checkpoint.load": "mtk resumes from train.checkpoint.dir's tracker",
    "train.checkpoint.save_on_exit": "mtk saves on SIGTERM/SIGUSR2 and at the end",
    "train.init_from": "a new run from other weights (Megatron-LM: --load with --finetune)",
    "train.tensorboard": "see --tensorboard-dir",
    "data.dir": "relative paths resolve under it",
    "data.fetch": "the getdata step",
    "data.corpus": "the preprocess step (its output prefixes join --data-path)",
    "data.folders": "expands to prefixes for --data-path",
    "data.tokenizer.legacy_eod_as_text": "the preprocess step",
}

