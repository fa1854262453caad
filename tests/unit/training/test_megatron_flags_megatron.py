"""The flag table (mtk/megatron_flags/) against Megatron-LM's and megatron-core's own code: every flag is one
Megatron-LM's parser has, under the attribute the table says; what the import gives a field when a command leaves
the flag out is that parser's default; every config field named is a field of megatron-core's config class."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from mtk import megatron_flags


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    import typing

    if not hasattr(typing, "override"):  # megatron.training uses Python 3.12's typing.override
        typing.override = lambda f: f  # type: ignore[attr-defined]
    from mtk.training import compat

    compat.install()
    from megatron.training.arguments import add_megatron_arguments

    return add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return parser._option_string_actions[flag]  # argparse's own index of its options


@pytest.mark.megatron  # Megatron-LM's parser (the module fixture)
def test_every_flag_is_megatron_lms_under_the_tables_name(parser):
    unknown = [f.flag for f in megatron_flags.FLAGS if f.flag not in parser._option_string_actions]
    assert unknown == []
    # validate_args stores this flag under the older name, which checkpoints record
    renamed = {"--num-virtual-stages-per-pipeline-rank": "virtual_pipeline_model_parallel_size"}
    wrong = {f.flag: (f.name, _action(parser, f.flag).dest) for f in megatron_flags.FLAGS
             if f.written in ("args", "record") and _action(parser, f.flag).dest != f.name
             and renamed.get(f.flag) != f.name}
    assert wrong == {}, "the args Namespace and megatron_lm_args.txt use the table's name: fix dest="
    by_mtk = [flag for flag in megatron_flags.SET_BY_MTK if flag not in parser._option_string_actions]
    assert by_mtk == []


@pytest.mark.megatron  # Megatron-LM's parser (the module fixture)
def test_without_the_flag_the_import_reads_megatron_lms_default(parser):
    # validate_args fills --split with its legacy '969, 30, 1' when data is given; the parser's own default is None
    checked = 0
    for f in megatron_flags.FLAGS:
        if f.absent is None or f.flag == "--split":
            continue
        default = _action(parser, f.flag).default
        if f.form == "value":
            assert default == f.absent, (f.flag, default, f.absent)
        elif f.form == "when":
            assert bool(default) == (f.absent in f.when), (f.flag, default, f.absent)
        else:  # a switch: the spec's value is the flag's attribute (store_true, or store_false for "false")
            assert bool(default) == bool(f.absent), (f.flag, default, f.absent)
        checked += 1
    assert checked >= 15


@pytest.mark.megatron  # megatron-core's config dataclasses and the signatures the engine calls
def test_every_core_argument_is_megatron_cores():
    """Each ``core`` target of a row or a derived value names a field of megatron-core's config class, or a parameter
    of the constructor or function the engine calls with it."""
    import inspect

    from mtk.training import compat

    compat.install()
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel, gpt_layer_specs
    from megatron.core.num_microbatches_calculator import StepBatchsizeNumMicroBatchesCalculator
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.transformer.transformer_config import TransformerConfig

    names = {cls.__name__: {f.name for f in dataclasses.fields(cls)}
             for cls in (TransformerConfig, OptimizerConfig, DistributedDataParallelConfig)}
    # the layer-spec builders take **kwargs and hand them to their *_submodules functions
    for target, fn in ((megatron_flags.SCHEDULER, OptimizerParamScheduler.__init__),
                       (megatron_flags.GPT, GPTModel.__init__),
                       (megatron_flags.LOCAL_SPEC, gpt_layer_specs.get_gpt_layer_local_submodules),
                       (megatron_flags.TE_SPEC, gpt_layer_specs.get_gpt_layer_with_transformer_engine_submodules),
                       (megatron_flags.GROUPS, parallel_state.initialize_model_parallel),
                       (megatron_flags.CALCULATOR, StepBatchsizeNumMicroBatchesCalculator.__init__)):
        names[target] = set(inspect.signature(fn).parameters)
    assert set(names) == set(megatron_flags.TARGETS)
    targets = [t for f in megatron_flags.FLAGS for t in f.core] + [t for d in megatron_flags.DERIVED for t in d.core]
    missing = [t for t in targets if t.partition(".")[2] not in names[t.partition(".")[0]]]
    assert missing == [] and len(targets) > 100


@pytest.mark.megatron  # Megatron-LM's parser (the module fixture)
def test_where_defaults_differ_the_table_says_megatron_lms(parser):
    """A flag without ``absent`` has mtk's default equal to Megatron-LM's, or none in Megatron-LM (a required or
    derived value: the import says what it uses)."""
    from pydantic import BaseModel

    from mtk.spec import Job

    def spec_default(path: str):
        model: type[BaseModel] = Job
        *parents, last = path.split(".")
        for part in parents:
            annotation = model.model_fields[part].annotation
            model = next(a for a in (annotation, *getattr(annotation, "__args__", ()))
                         if isinstance(a, type) and issubclass(a, BaseModel))
        return model.model_fields[last].get_default(call_default_factory=True)

    differ = []
    for f in megatron_flags.FLAGS:
        if not f.spec or f.absent is not None:
            continue
        theirs, ours = _action(parser, f.flag).default, spec_default(f.spec)
        same = theirs == ours if f.form == "value" else bool(theirs) == (ours in f.when if f.form == "when" else ours)
        if not same and theirs is not None:
            differ.append((f.flag, theirs, ours))
    # --num-query-groups: Megatron-LM's 1 is read only with --group-query-attention (the import handles both).
    # --use-checkpoint-opt_param-scheduler: without it (or --override-opt_param-scheduler) Megatron-LM asserts that the
    # checkpoint's schedule equals the command's, a mode mtk does not offer (train.lr_schedule_on_resume says why)
    assert differ == [("--num-query-groups", 1, None), ("--use-checkpoint-opt_param-scheduler", False, "keep")]


@pytest.mark.megatron  # Megatron-LM's parser (the module fixture)
def test_the_import_reads_a_whole_number_where_megatron_lms_parser_does(parser):
    """``mtk import`` refuses '1e3' for a flag whose spec field is a whole number, as Megatron-LM's ``type=int``
    stops at it: that holds only where the two agree, for every flag that takes one value."""
    from mtk.launcher.megatron_import.flags import whole_number

    # one value each (a flag of several, --rampup-batch-size START INCR SAMPLES, has a reader of its own)
    rows = [f for f in megatron_flags.FLAGS if f.spec and f.form == "value" and _action(parser, f.flag).nargs is None]
    disagree = {f.flag: (whole_number(f), _action(parser, f.flag).type) for f in rows
                if whole_number(f) != (_action(parser, f.flag).type is int)}
    assert disagree == {}
    assert sum(whole_number(f) for f in rows) >= 30  # the check reads real fields
