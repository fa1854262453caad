"""The one table between mtk's spec, megatron-core's config fields and Megatron-LM's command-line flags.

Each :class:`Flag` row says which spec field a Megatron-LM flag is (or that mtk sets it itself), which
megatron-core config fields it becomes and how the value converts. The engine builds its TransformerConfig /
OptimizerConfig / DDP kwargs from it where the mapping is one to one (:func:`core_kwargs`), the checkpoint's
``args`` Namespace and ``megatron_lm_args.txt`` take their names and values from it (:func:`args_values`,
:func:`argv_from_args`), ``mtk import`` reads a Megatron-LM command line back through it, a key typed in
Megatron's words gets its mtk field suggested (:func:`suggestion`), and ``docs/megatron-lm-flags.md`` is
rendered from it (:func:`reference_markdown`; a test keeps the file equal). Plain data: no torch, no pydantic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Form = Literal["value", "true", "false", "when"]
TC, OC, DDP = "TransformerConfig", "OptimizerConfig", "DistributedDataParallelConfig"


@dataclass(frozen=True)
class Flag:
    """One Megatron-LM flag.

    ``form``: ``value`` takes a value (``--lr 3e-4``); ``true`` is present when the spec field is true; ``false``
    when it is false (``--disable-bias-linear`` ↔ ``model.add_bias_linear: false``); ``when`` when the spec field
    holds one of ``when`` (``--bf16`` ↔ ``train.precision`` bf16 or fp8; importing it sets ``when[0]``).
    ``spec`` is empty for a flag mtk sets itself: ``fixed`` is then the value it always uses (None: derived
    from other fields or from the device plan, ``why`` says how). ``written``: ``args`` — recorded in the
    checkpoint's args Namespace under ``dest`` and written to megatron_lm_args.txt from it; ``job`` — written
    from the job by megatron_lm.py's own functions (data, tokenizer, recipe); ``""`` — never written.
    ``only`` names the Namespace field (a ``dest``) that must be truthy for the flag to apply (the MoE flags).
    ``engine``: the engine resolves the config field itself (from the device plan or only with one precision or
    recompute mode), so :func:`core_kwargs` leaves it out.
    """

    flag: str
    spec: str = ""
    core: tuple[str, ...] = ()
    form: Form = "value"
    when: tuple[Any, ...] = ()
    fixed: Any = None
    read: Callable[[Any], Any] | None = None  # the resolved value from the Job, when not the spec field as given
    dest: str = ""
    written: Literal["args", "job", ""] = "args"
    only: str = ""
    absent: Any = None  # Megatron-LM's value without the flag, where mtk's default differs (the import sets it)
    engine: bool = False  # the engine resolves it (device plan, precision recipe): not in core_kwargs
    why: str = ""

    @property
    def name(self) -> str:
        """Megatron-LM's argparse attribute for the flag."""
        return self.dest or self.flag[2:].replace("-", "_")

    def value(self, job: Any) -> Any:
        """The spec's value for this flag as Megatron reads it (a bool for the flag-only forms)."""
        if not self.spec:
            return self.fixed if self.read is None else self.read(job)
        raw = self.read(job) if self.read is not None else get(job, self.spec)
        if self.form == "when":
            return raw in self.when
        return raw


def get(obj: Any, dotted: str) -> Any:
    """The field at ``dotted`` (None inside an unset section: ``train.fp8`` without fp8)."""
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


def _moe(job: Any) -> bool:
    return bool(job.model.moe.num_experts)


FLAGS: tuple[Flag, ...] = (
    # --- model
    Flag("--num-layers", "model.num_layers", (f"{TC}.num_layers",)),
    Flag("--hidden-size", "model.hidden_size", (f"{TC}.hidden_size",)),
    Flag("--ffn-hidden-size", "model.ffn_hidden_size", (f"{TC}.ffn_hidden_size",), read=lambda j: j.model.ffn,
         why="unset: 4 × hidden_size"),
    Flag("--num-attention-heads", "model.num_attention_heads", (f"{TC}.num_attention_heads",)),
    Flag("--kv-channels", read=lambda j: j.model.hidden_size // j.model.num_attention_heads,
         why="hidden_size ÷ num_attention_heads"),
    Flag("--group-query-attention", form="true", read=lambda j: j.model.query_groups != j.model.num_attention_heads,
         why="on when model.num_query_groups differs from the heads"),
    Flag("--num-query-groups", "model.num_query_groups", (f"{TC}.num_query_groups",),
         read=lambda j: j.model.query_groups,
         why="unset: the heads (MHA); Megatron-LM reads it only with --group-query-attention"),
    Flag("--seq-length", "model.seq_length"),
    Flag("--max-position-embeddings", "model.max_position_embeddings", read=lambda j: j.model.max_positions,
         why="unset: seq_length"),
    Flag("--position-embedding-type", "model.position_embedding"),
    Flag("--no-position-embedding", form="false", dest="add_position_embedding",
         read=lambda j: j.model.position_embedding != "rope",
         why="with rope (Megatron-LM's default adds a learned table)"),
    Flag("--use-rotary-position-embeddings", "model.position_embedding", form="when", when=("rope",),
         why="Megatron-LM's older spelling of --position-embedding-type rope"),
    Flag("--rotary-base", "model.rotary_base", read=lambda j: int(j.model.rotary_base),
         why="an integer in Megatron-LM"),
    Flag("--rotary-percent", fixed=1.0, why="RoPE on the whole head"),
    Flag("--normalization", "model.normalization", (f"{TC}.normalization",)),
    Flag("--swiglu", "model.activation", (f"{TC}.gated_linear_unit",), form="when", when=("swiglu",),
         absent="gelu", why="swiglu: gated_linear_unit with activation_func silu; gelu otherwise"),
    Flag("--apply-layernorm-1p", "model.layernorm_1p", (f"{TC}.layernorm_zero_centered_gamma",), form="true",
         dest="layernorm_zero_centered_gamma"),
    Flag("--attention-softmax-in-fp32", "model.attention_softmax_in_fp32", (f"{TC}.attention_softmax_in_fp32",),
         form="true"),
    Flag("--disable-bias-linear", "model.add_bias_linear", (f"{TC}.add_bias_linear",), form="false",
         dest="add_bias_linear"),
    Flag("--untie-embeddings-and-output-weights", "model.untie_embeddings", form="true",
         why="GPTModel's share_embeddings_and_output_weights is its negation"),
    Flag("--hidden-dropout", "model.hidden_dropout", (f"{TC}.hidden_dropout",)),
    Flag("--attention-dropout", "model.attention_dropout", (f"{TC}.attention_dropout",)),
    Flag("--init-method-std", "model.init_method_std", (f"{TC}.init_method_std",)),
    Flag("--make-vocab-size-divisible-by", "model.make_vocab_size_divisible_by"),
    Flag("--vocab-size", "model.vocab_size", written="job",
         why="written with NullTokenizer (mock data); other tokenizers bring their own"),
    # --- mixture of experts
    Flag("--num-experts", "model.moe.num_experts", (f"{TC}.num_moe_experts",),
         read=lambda j: j.model.moe.num_experts or None, only="num_experts", why="0 (dense) is Megatron-LM's None"),
    Flag("--moe-ffn-hidden-size", "model.moe.ffn_hidden_size", (f"{TC}.moe_ffn_hidden_size",), only="num_experts",
         read=lambda j: (j.model.moe.ffn_hidden_size or j.model.ffn) if _moe(j) else None, why="unset: the dense FFN"),
    Flag("--moe-router-topk", "model.moe.router_topk", (f"{TC}.moe_router_topk",), only="num_experts"),
    Flag("--moe-aux-loss-coeff", "model.moe.aux_loss_coeff", (f"{TC}.moe_aux_loss_coeff",), only="num_experts",
         absent=0.0),
    Flag("--moe-expert-capacity-factor", "model.moe.capacity_factor", (f"{TC}.moe_expert_capacity_factor",),
         only="num_experts", why="unset: dropless"),
    Flag("--moe-router-load-balancing-type", core=(f"{TC}.moe_router_load_balancing_type",), fixed="aux_loss",
         only="num_experts"),
    Flag("--moe-token-dispatcher-type", core=(f"{TC}.moe_token_dispatcher_type",), fixed="alltoall",
         only="num_experts"),
    Flag("--moe-grouped-gemm", core=(f"{TC}.moe_grouped_gemm",), form="true", fixed=False, only="num_experts"),
    Flag("--moe-pad-expert-input-to-capacity", core=(f"{TC}.moe_pad_expert_input_to_capacity",), form="true",
         fixed=False, written="", only="num_experts"),
    # --- parallelism
    Flag("--tensor-model-parallel-size", "parallel.tp", (f"{TC}.tensor_model_parallel_size",)),
    Flag("--pipeline-model-parallel-size", "parallel.pp", (f"{TC}.pipeline_model_parallel_size",)),
    Flag("--num-virtual-stages-per-pipeline-rank", "parallel.virtual_pp",
         (f"{TC}.virtual_pipeline_model_parallel_size",), dest="virtual_pipeline_model_parallel_size"),
    Flag("--context-parallel-size", "parallel.cp", (f"{TC}.context_parallel_size",)),
    Flag("--expert-model-parallel-size", "parallel.ep", (f"{TC}.expert_model_parallel_size",),
         read=lambda j: j.parallel.ep if _moe(j) else 1, why="1 for a dense model"),
    Flag("--sequence-parallel", "parallel.sequence_parallel", (f"{TC}.sequence_parallel",), form="true"),
    Flag("--use-distributed-optimizer", "parallel.distributed_optimizer",
         (f"{OC}.use_distributed_optimizer", f"{DDP}.use_distributed_optimizer"), form="true"),
    Flag("--overlap-grad-reduce", core=(f"{DDP}.overlap_grad_reduce",), form="true", written="", engine=True,
         why="the device plan (on with a GPU and data parallel > 1)"),
    Flag("--overlap-param-gather", core=(f"{DDP}.overlap_param_gather",), form="true", written="", engine=True,
         why="the device plan (with the distributed optimizer on a GPU)"),
    # --- schedule and optimizer
    Flag("--micro-batch-size", "train.micro_batch_size"),
    Flag("--global-batch-size", "train.global_batch_size"),
    Flag("--train-iters", "train.iterations"),
    Flag("--train-samples", "train.iterations", written="", why="÷ the global batch, as Megatron-LM counts"),
    Flag("--lr", "train.lr", (f"{OC}.lr",)),
    Flag("--min-lr", "train.min_lr", (f"{OC}.min_lr",), absent=0.0),
    Flag("--lr-decay-style", "train.lr_decay_style", absent="linear"),
    Flag("--lr-warmup-iters", "train.lr_warmup_iters"),
    Flag("--lr-warmup-samples", "train.lr_warmup_iters", written="", why="÷ the global batch, as Megatron-LM counts"),
    Flag("--lr-decay-iters", "train.lr_decay_iters", read=lambda j: j.train.lr_decay_iters or j.train.iterations,
         why="unset: train.iterations"),
    Flag("--lr-decay-samples", "train.lr_decay_iters", written="", why="÷ the global batch, as Megatron-LM counts"),
    Flag("--weight-decay", "train.weight_decay", (f"{OC}.weight_decay",), absent=0.01),
    Flag("--optimizer", core=(f"{OC}.optimizer",), fixed="adam"),
    Flag("--adam-beta1", "train.adam_beta1", (f"{OC}.adam_beta1",)),
    Flag("--adam-beta2", "train.adam_beta2", (f"{OC}.adam_beta2",), absent=0.999),
    Flag("--adam-eps", "train.adam_eps", (f"{OC}.adam_eps",)),
    Flag("--clip-grad", "train.clip_grad", (f"{OC}.clip_grad",)),
    Flag("--seed", "train.seed"),
    Flag("--decoupled-lr", "train.decoupled_lr", (f"{OC}.decoupled_lr",), written="job"),
    Flag("--decoupled-min-lr", "train.decoupled_min_lr", (f"{OC}.decoupled_min_lr",), written="job"),
    # --- precision
    Flag("--bf16", "train.precision", (f"{TC}.bf16", f"{OC}.bf16"), form="when", when=("bf16", "fp8"),
         absent="fp32", why="bf16, or fp8 (whose weights are bf16: the import reads fp8 with --fp8-format)"),
    Flag("--fp16", "train.precision", (f"{TC}.fp16", f"{OC}.fp16"), form="when", when=("fp16",)),
    Flag("--initial-loss-scale", "train.initial_loss_scale", (f"{OC}.initial_loss_scale",), written="job",
         absent=2.0**32, why="written with fp16"),
    Flag("--fp8-format", "train.fp8.format", (f"{TC}.fp8",), written="job", engine=True,
         read=lambda j: j.train.fp8_settings.format, why="sets train.precision fp8"),
    Flag("--fp8-recipe", "train.fp8.recipe", (f"{TC}.fp8_recipe",), written="job", engine=True,
         read=lambda j: j.train.fp8_settings.recipe),
    Flag("--fp8-amax-history-len", "train.fp8.amax_history_len", (f"{TC}.fp8_amax_history_len",), written="job",
         engine=True, absent=1, read=lambda j: j.train.fp8_settings.amax_history_len, why="delayed recipe"),
    Flag("--fp8-amax-compute-algo", "train.fp8.amax_compute_algo", (f"{TC}.fp8_amax_compute_algo",), written="job",
         engine=True, absent="most_recent", read=lambda j: j.train.fp8_settings.amax_compute_algo,
         why="delayed recipe"),
    Flag("--fp8-param-gather", "train.fp8.param_gather", (f"{TC}.fp8_param", f"{DDP}.fp8_param_gather"), form="true",
         written="job", engine=True, absent=False, why="unset: the device plan's choice"),
    Flag("--grad-reduce-in-bf16", "train.grad_reduce_dtype", (f"{DDP}.grad_reduce_in_fp32",), form="when",
         when=("bf16",), written="job", engine=True, absent="fp32",
         why="grad_reduce_in_fp32 is its negation; auto: the device plan's choice"),
    Flag("--cross-entropy-loss-fusion", "train.cross_entropy_fusion", (f"{TC}.cross_entropy_loss_fusion",),
         form="true", written="job", engine=True, absent=False, why="unset: the device plan's choice"),
    Flag("--cross-entropy-fusion-impl", core=(f"{TC}.cross_entropy_fusion_impl",), fixed="native", written="job"),
    Flag("--calculate-per-token-loss", "train.per_token_loss", (f"{TC}.calculate_per_token_loss",), form="true",
         written="job"),
    Flag("--no-check-for-nan-in-loss-and-grad", "train.check_nan_in_grad", (f"{DDP}.check_for_nan_in_grad",),
         form="false", dest="check_for_nan_in_loss_and_grad", written="job", engine=True, absent=True,
         why="unset: the device plan's choice"),
    Flag("--manual-gc", "train.manual_gc", form="true", written="job", absent=False),
    Flag("--manual-gc-interval", "train.manual_gc_interval", written="job"),
    # --- activation recomputation
    Flag("--recompute-granularity", "train.recompute", (f"{TC}.recompute_granularity",), written="job", engine=True,
         why="none: the flag is left out"),
    Flag("--recompute-activations", "train.recompute", form="when", when=("selective",), written="",
         why="Megatron-LM's shorthand for --recompute-granularity selective"),
    Flag("--recompute-method", core=(f"{TC}.recompute_method",), fixed="uniform", written="job", engine=True,
         why="full recompute"),
    Flag("--recompute-num-layers", "train.recompute_num_layers", (f"{TC}.recompute_num_layers",), written="job",
         engine=True, why="full recompute"),
    # --- evaluation, logging, checkpoints
    Flag("--eval-interval", "train.eval_interval", written="job",
         why="unset (no evaluation): iterations + 1 with --eval-iters 0"),
    Flag("--eval-iters", "train.eval_iters", written="job", absent=100,
         why="0: no evaluation (train.eval_interval unset)"),
    Flag("--log-interval", "train.log_interval", written="job", absent=100),
    Flag("--save-interval", "train.checkpoint.save_interval", written="job", why="unset: train.iterations",
         read=lambda j: j.train.checkpoint.save_interval or j.train.iterations),
    Flag("--save", "train.checkpoint.dir", written="job", why="unset: <runs_dir>/<name>/checkpoints"),
    Flag("--load", "train.checkpoint.dir", written="job", why="mtk resumes from where it saves"),
    Flag("--ckpt-format", fixed="torch_dist", written="job"),
    Flag("--dist-ckpt-optim-fully-reshardable", "train.checkpoint.fully_reshardable", form="true",
         read=lambda j: j.parallel.distributed_optimizer and j.train.checkpoint.fully_reshardable,
         why="distributed optimizer only"),
    Flag("--tensorboard-dir", written="", why="<run dir>/tensorboard (train.tensorboard turns it off)"),
    # --- data and tokenizer
    Flag("--data-path", "data.blend", written="job", why="weight prefix pairs (or prefixes of weight 1)"),
    Flag("--mock-data", written="job", why="no data.blend, data.folders or data.corpus"),
    Flag("--split", "data.split", written="job", absent="969,30,1",
         why="the test share joins valid when no test samples are drawn"),
    Flag("--data-cache-path", "data.cache_dir", written="job", why="unset: <data.dir>/index-cache"),
    Flag("--num-workers", "data.num_workers", written="job"),
    Flag("--tokenizer-type", "data.tokenizer.type", written="job"),
    Flag("--vocab-file", "data.tokenizer.vocab_file", written="job", why="GPT2BPETokenizer"),
    Flag("--merge-file", "data.tokenizer.merge_file", written="job", why="GPT2BPETokenizer"),
    Flag("--tokenizer-model", "data.tokenizer.model", written="job",
         why="HuggingFaceTokenizer: Megatron-LM takes the folder holding tokenizer.json"),
)

# Flags mtk decides itself from the device plan or its own code, with what decides them (not in the table above:
# they have no value to carry; the import lists them as set by mtk).
SET_BY_MTK: dict[str, str] = {
    "--use-mcore-models": "mtk always builds megatron-core's GPTModel",
    "--transformer-impl": "the device plan: Transformer Engine where it imports, megatron-core's local spec otherwise",
    "--attention-backend": "model.attention_backend (auto, sdpa, unfused, te), chosen with the device plan",
    "--use-flash-attn": "model.attention_backend (auto picks the fused/flash kernels on a GPU)",
    "--no-masked-softmax-fusion": "the device plan's fusions",
    "--no-rope-fusion": "the device plan's fusions",
    "--no-bias-gelu-fusion": "the device plan's fusions",
    "--no-bias-swiglu-fusion": "the device plan's fusions",
    "--no-bias-dropout-fusion": "the device plan's fusions",
    "--no-gradient-accumulation-fusion": "the device plan's fusions",
    "--no-persist-layer-norm": "the device plan's fusions",
    "--distributed-backend": "nccl on a GPU, gloo on CPU",
    "--use-checkpoint-opt_param-scheduler": "train.lr_schedule_on_resume: keep",
    "--override-opt_param-scheduler": "train.lr_schedule_on_resume: replan",
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
    "train.lr_schedule_on_resume": "see --use-checkpoint-opt_param-scheduler",
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


def rows(written: str | None = None) -> list[Flag]:
    return [f for f in FLAGS if written is None or f.written == written]


def applies(flag: Flag, job: Any) -> bool:
    """Whether the flag's guard (``only``) holds for this job."""
    return not flag.only or bool(BY_NAME[flag.only].value(job))


def core_kwargs(job: Any, config: str) -> dict[str, Any]:
    """``config``'s keyword arguments that map one to one from the spec (or are fixed by mtk): the rows whose
    ``core`` names a field of ``config``; a flag-only form gives a bool (negated for ``false`` rows)."""
    out: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.engine or not applies(flag, job):
            continue
        for target in flag.core:
            owner, _, field = target.partition(".")
            if owner == config:
                out[field] = flag.value(job)
    return out


def args_values(job: Any) -> dict[str, Any]:
    """The checkpoint ``args`` fields the table writes (``written == "args"``), by Megatron-LM's names."""
    return {flag.name: flag.value(job) for flag in FLAGS if flag.written == "args"}


def argv_from_args(args: Any) -> list[str]:
    """The Megatron-LM flags for a checkpoint's args Namespace (the ``args`` rows, in table order): a value
    row when the Namespace holds one, a flag-only row when its field says so; guarded rows when ``only`` holds."""
    out: list[str] = []
    for flag in rows("args"):
        if not hasattr(args, flag.name) or (flag.only and not getattr(args, flag.only, None)):
            continue
        value = getattr(args, flag.name)
        if flag.form == "value":
            if value is not None:
                out += [flag.flag, str(value)]
        elif bool(value) == (flag.form != "false"):
            out.append(flag.flag)
    return out


def _key(text: str) -> str:
    return text.strip().lstrip("-").replace("-", "_").lower()


def lookup(name: str) -> Flag | None:
    """The row a name in Megatron's words means: a flag (``--tensor-model-parallel-size``), its argparse attribute
    (``tensor_model_parallel_size``) or a megatron-core config field; rows with a spec field first."""
    key = _key(name)
    found = [f for f in FLAGS if key in {_key(f.flag), f.name, *(c.partition(".")[2] for c in f.core)}]
    found.sort(key=lambda f: not f.spec)
    return found[0] if found else None


def suggestion(key: str) -> str:
    """``"parallel.tp (--tensor-model-parallel-size)"`` for a key typed in Megatron's words; "" otherwise."""
    flag = lookup(key.rpartition(".")[2])
    if flag is None or not flag.spec or flag.spec == key:
        return ""
    return f"{flag.spec} ({flag.flag})"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def reference_markdown() -> str:
    """docs/megatron-lm-flags.md: every row of the table (a test keeps the file equal to this)."""
    lines = [
        "# Megatron-LM flags and mtk's spec",
        "",
        "Generated from `mtk/megatron_flags.py` by `python -m mtk.megatron_flags docs/megatron-lm-flags.md`;",
        "`tests/unit/test_megatron_flags.py` keeps this file equal to the table. The same table builds the engine's",
        "megatron-core configs, writes `megatron_lm_args.txt` beside each checkpoint, reads a Megatron-LM command",
        "line back (`mtk import`) and suggests the mtk field for a key typed in Megatron's words.",
        "",
        "*Without the flag*: the value `mtk import` gives the field when a command leaves the flag out — Megatron-LM's",
        "own default, where mtk's differs (a Megatron-LM command without `--bf16` trains in fp32).",
        "",
        "| Megatron-LM flag | mtk spec field | megatron-core config field | form | without the flag | notes |",
        "|---|---|---|---|---|---|",
    ]
    for f in FLAGS:
        form = {"value": "value", "true": "on when true", "false": "on when false",
                "when": "on when " + " or ".join(map(str, f.when))}[f.form]
        spec = f"`{f.spec}`" if f.spec else ("set by mtk: `" + show(f.fixed) + "`" if f.read is None and f.fixed
                                             is not None else "set by mtk")
        core = ", ".join(f"`{c}`" for c in f.core)
        note = "; ".join(x for x in (f.why, f"only with {BY_NAME[f.only].flag}" if f.only else "") if x)
        absent = "" if f.absent is None else f"`{show(f.absent)}`"
        lines.append(f"| `{f.flag}` | {spec} | {core} | {form} | {absent} | {_cell(note)} |")
    lines += ["", "## Set by mtk itself", "", "| Megatron-LM flag | what decides it |", "|---|---|"]
    lines += [f"| `{flag}` | {_cell(why)} |" for flag, why in SET_BY_MTK.items()]
    lines += ["", "Any other flag is unknown to mtk: `mtk import` lists it by name and leaves it out of the spec.", "",
              "## Spec fields with no Megatron-LM flag", "", "| mtk spec field | what it is |", "|---|---|"]
    lines += [f"| `{spec}` | {_cell(why)} |" for spec, why in SPEC_ONLY.items()]
    lines.append("")
    return "\n".join(lines)


def show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


if __name__ == "__main__":  # python -m mtk.megatron_flags docs/megatron-lm-flags.md
    import sys
    from pathlib import Path

    from mtk.files import atomic_write

    atomic_write(Path(sys.argv[1]), reference_markdown())
