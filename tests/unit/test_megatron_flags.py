"""The one table between the spec, megatron-core and Megatron-LM (mtk/megatron_flags/): its reference page is
generated from it, every spec field is either in it or named as mtk's own, and a key typed in Megatron's words
gets the mtk field it means."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from mtk import megatron_flags
from mtk.spec import Job
from mtk.spec.errors import SpecError
from mtk.spec.loader import apply_overrides, validate
from mtk.suggest import megatron_field

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "megatron-lm-flags.md"


def test_reference_page_is_the_table():
    assert DOC.read_text() == megatron_flags.reference_markdown(), (
        "docs/megatron-lm-flags.md differs from the table: python -m mtk.megatron_flags docs/megatron-lm-flags.md")
    for flag in megatron_flags.FLAGS:
        assert f"| `{flag.flag}` |" in DOC.read_text()


def _leaves(model: type[BaseModel], prefix: str) -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        inner = megatron_flags_inner(info.annotation)
        path = f"{prefix}.{name}"
        out += _leaves(inner, path) if inner is not None else [path]
    return out


def megatron_flags_inner(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


@pytest.mark.parametrize("section", ["model", "parallel", "train", "data"])
def test_every_spec_field_has_a_flag_or_is_named_as_mtks_own(section):
    """A new field in these sections is either written to Megatron-LM (a table row) or said to be mtk's own —
    the import and megatron_lm_args.txt cannot drop it without a word."""
    model = megatron_flags_inner(Job.model_fields[section].annotation)
    assert model is not None
    covered = {f.spec for f in megatron_flags.FLAGS if f.spec}
    own = set(megatron_flags.SPEC_ONLY)
    missing = [leaf for leaf in _leaves(model, section)
               if not any(leaf == o or leaf.startswith(o + ".") for o in covered | own)]
    assert missing == [], f"add a row to FLAGS or a SPEC_ONLY entry for: {missing}"
    stale = [o for o in own if "." in o and not any(leaf == o or leaf.startswith(o + ".")
                                                    for s in ("model", "parallel", "train", "data")
                                                    for leaf in _leaves(megatron_flags_inner(
                                                        Job.model_fields[s].annotation), s))]
    assert stale == []


@pytest.mark.parametrize(("typed", "meant"), [
    ("parallel.tensor_model_parallel_size", "parallel.tp (--tensor-model-parallel-size)"),
    ("train.recompute_granularity", "train.recompute (--recompute-granularity)"),
    ("parallel.pipeline-model-parallel-size", "parallel.pp (--pipeline-model-parallel-size)"),
    ("model.num_moe_experts", "model.moe.num_experts (--num-experts)"),  # megatron-core's TransformerConfig name
    ("train.train_iters", "train.iterations (--train-iters)"),
    ("train.bf16", "train.precision (--bf16)"),
    ("model.lr", "train.lr (--lr)"),  # a field in another section
    ("parallel.tp_size", ""),  # no Megatron name: the spelling suggestion applies
])
def test_megatron_names_suggest_the_mtk_field(typed, meant):
    assert megatron_field(typed) == meant


def test_set_in_megatrons_words_is_answered_with_the_field():
    data = {"name": "t", "model": {"preset": "tiny"}}
    with pytest.raises(SpecError) as err:
        validate(apply_overrides(data, ["parallel.tensor_model_parallel_size=2", "train.recompute_granularity=full"]))
    text = str(err.value)
    assert "did you mean parallel.tp (--tensor-model-parallel-size)?" in text
    assert "did you mean train.recompute (--recompute-granularity)?" in text
    assert "sequence_parallel'" not in text and "recompute_num_layers'" not in text
    with pytest.raises(SpecError) as err:  # a plain typo keeps the closest key
        validate(apply_overrides(data, ["parallel.sequence_paralel=true"]))
    assert "did you mean 'sequence_parallel'?" in str(err.value)


def test_core_kwargs_follow_the_spec_and_mtks_fixed_values():
    dense = validate({"name": "t", "model": {"preset": "tiny"}, "parallel": {"tp": 2},
                      "train": {"precision": "fp32"}, "cluster": {"nodes": 1, "procs_per_node": 2, "device": "cpu"}})
    kw = megatron_flags.core_kwargs(dense, megatron_flags.TC)
    assert (kw["tensor_model_parallel_size"], kw["num_layers"], kw["bf16"], kw["fp16"]) == (2, 2, False, False)
    assert kw["ffn_hidden_size"] == 256 and kw["num_query_groups"] == 4  # resolved, not the spec's None
    assert "num_moe_experts" not in kw and kw["expert_model_parallel_size"] == 1
    moe = validate({"name": "t", "model": {"preset": "tiny", "moe": {"num_experts": 4}}, "parallel": {"ep": 2},
                    "cluster": {"nodes": 1, "procs_per_node": 2, "device": "gpu"}})
    kw = megatron_flags.core_kwargs(moe, megatron_flags.TC)
    assert (kw["num_moe_experts"], kw["moe_router_load_balancing_type"], kw["moe_grouped_gemm"]) == \
        (4, "aux_loss", False)
    assert kw["bf16"] is True and kw["expert_model_parallel_size"] == 2
    assert megatron_flags.core_kwargs(moe, megatron_flags.OC)["optimizer"] == "adam"


def test_megatron_lms_defaults_for_what_a_command_leaves_out_apply_where_their_row_does():
    """absent_values (the import's "Megatron-LM's default where mtk's differs"): a row's conditions hold for it as
    for the writer and the engine — the fp16 loss scale only with fp16, the NaN check's default only where
    Megatron-LM keeps it on, the delayed recipe's amax history only with the delayed recipe — so what the import
    fills in validates."""
    from mtk.megatron_flags import absent_values

    plain = absent_values({}, set())
    assert (plain["train.precision"], plain["model.activation"], plain["train.check_nan_in_grad"]) == \
        ("fp32", "gelu", True)
    assert "train.initial_loss_scale" not in plain and "train.grad_reduce_dtype" not in plain  # fp32: not theirs
    assert "model.moe.aux_loss_coeff" not in plain  # dense
    fp16 = absent_values({"train": {"precision": "fp16"}}, {"--fp16"})
    assert fp16["train.initial_loss_scale"] == 2.0**32 and "train.check_nan_in_grad" not in fp16
    assert "train.precision" not in fp16  # the command said it
    delayed = absent_values({"train": {"precision": "fp8"}}, {"--fp8-format"})
    assert (delayed["train.fp8.amax_history_len"], delayed["train.fp8.amax_compute_algo"]) == (1, "most_recent")
    spec = {"name": "t", "model": {"preset": "tiny"}, "cluster": {"device": "gpu"},
            "train": {"precision": "fp8", "fp8": {"recipe": "tensorwise"}}}
    tensorwise = absent_values(spec, {"--fp8-format", "--fp8-recipe"})
    assert not {"train.fp8.amax_history_len", "train.fp8.amax_compute_algo"} & set(tensorwise)
    for field, value in tensorwise.items():  # Megatron-LM's defaults on a tensorwise fp8 command: a valid spec
        node = spec
        *parents, last = field.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    validate(spec)
    moe = absent_values({"model": {"moe": {"num_experts": 4}}}, {"--num-experts"})
    assert moe["model.moe.aux_loss_coeff"] == 0.0


def test_two_rows_setting_one_megatron_core_argument_is_refused(monkeypatch):
    from mtk.megatron_flags import mapping

    job = validate({"name": "t", "model": {"preset": "tiny"}})
    twice = (*megatron_flags.FLAGS, megatron_flags.Flag("--other-layers", "model.num_layers",
                                                        (f"{megatron_flags.TC}.num_layers",)))
    monkeypatch.setattr(mapping, "FLAGS", twice)
    with pytest.raises(ValueError, match=r"TransformerConfig\.num_layers is set by two rows"):
        megatron_flags.core_kwargs(job, megatron_flags.TC)


def test_megatrons_names_map_back_to_the_spec_field_they_are_about():
    """The pre-submit check names a megatron-core refusal's field from the table (the reverse map it kept by hand
    agreed on these, and on fp8 the table's answer is the format field it sets)."""
    fields = megatron_flags.names_to_fields()
    assert {name: fields[name] for name in (
        "tensor_model_parallel_size", "expert_tensor_parallel_size", "virtual_pipeline_model_parallel_size",
        "num_moe_experts", "moe_ffn_hidden_size", "add_bias_linear", "num_query_groups", "recompute_method",
        "recompute_granularity", "lr_warmup_steps", "lr_decay_steps", "max_sequence_length", "vocab_size",
        "layernorm_epsilon", "bf16", "fp8")} == {
        "tensor_model_parallel_size": "parallel.tp", "expert_tensor_parallel_size": "parallel.tp",
        "virtual_pipeline_model_parallel_size": "parallel.virtual_pp", "num_moe_experts": "model.moe.num_experts",
        "moe_ffn_hidden_size": "model.moe.ffn_hidden_size", "add_bias_linear": "model.add_bias_linear",
        "num_query_groups": "model.num_query_groups", "recompute_method": "train.recompute",
        "recompute_granularity": "train.recompute", "lr_warmup_steps": "train.lr_warmup_iters",
        "lr_decay_steps": "train.lr_decay_iters", "max_sequence_length": "model.max_position_embeddings",
        "vocab_size": "model.vocab_size", "layernorm_epsilon": "model.norm_epsilon", "bf16": "train.precision",
        "fp8": "train.fp8.format"}
    assert not {"seed", "split", "save", "load"} & set(fields)  # plain words are too likely to be prose


def test_the_warmup_is_one_row_or_the_other_in_every_direction():
    """train.lr_warmup_fraction and train.lr_warmup_iters reach the same scheduler argument through two rows that
    never both apply: the engine's scheduler gets the fraction's samples, the check names the field the job uses."""
    frac = validate({"name": "t", "model": {"preset": "tiny"},
                     "train": {"global_batch_size": 8, "iterations": 100, "lr_warmup_fraction": 0.05}})
    iters = validate({"name": "t", "model": {"preset": "tiny"},
                      "train": {"global_batch_size": 8, "iterations": 100, "lr_warmup_iters": 5}})
    assert megatron_flags.core_kwargs(frac, megatron_flags.SCHEDULER)["lr_warmup_steps"] == pytest.approx(40.0)
    assert megatron_flags.core_kwargs(iters, megatron_flags.SCHEDULER)["lr_warmup_steps"] == 40
    assert megatron_flags.names_to_fields(frac)["lr_warmup_steps"] == "train.lr_warmup_fraction"
    assert megatron_flags.names_to_fields(iters)["lr_warmup_steps"] == "train.lr_warmup_iters"
    assert megatron_flags.suggestion("train.lr_warmup_fraction") == ""  # its own name: nothing to suggest


def test_a_resumed_schedule_is_recorded_under_megatron_lms_names():
    from types import SimpleNamespace

    job = validate({"name": "t", "model": {"preset": "tiny"}, "train": {"global_batch_size": 8}})
    args = SimpleNamespace(**megatron_flags.args_values(job))
    scheduler = SimpleNamespace(max_lr=1e-3, min_lr=1e-5, lr_decay_style="linear", lr_warmup_steps=40,
                                lr_decay_steps=800)
    megatron_flags.record_schedule(args, scheduler, 8)
    assert (args.lr, args.min_lr, args.lr_decay_style, args.lr_warmup_iters, args.lr_decay_iters) == \
        (1e-3, 1e-5, "linear", 5, 100)
    assert args.lr_warmup_fraction is None
    # a run whose spec gives the warmup as a fraction records the checkpoint's warmup as one (Megatron-LM refuses
    # --lr-warmup-iters beside --lr-warmup-fraction)
    args.lr_warmup_fraction = 0.1
    megatron_flags.record_schedule(args, scheduler, 8)
    assert (args.lr_warmup_fraction, args.lr_warmup_iters) == (0.05, 0)
