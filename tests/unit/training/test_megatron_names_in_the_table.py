"""Megatron's names live in one place: the flag table (mtk/megatron_flags/). The product code that writes the
checkpoint's args and megatron_lm_args.txt, builds megatron-core's objects (the engine) and checks a spec against
megatron-core reads the table; none of it types a Megatron-LM flag, records a Megatron-LM argument by name or sets a
megatron-core config field by name. The names come from Megatron-LM's own parser and megatron-core's own classes,
so a flag or field the table does not know yet is caught too.

What stays outside, each named with its reason: mtk's own command-line options that happen to share a Megatron-LM
flag's spelling, another program's flags (tools/preprocess_data.py's), the training loop's runtime hooks on the
built config, and the importer's few readers the table cannot hold (each narrowed below: the flags mtk does not
map, the readers that need several flags at once); its absent-flag defaults come from the table
(``absent_values``)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import subprocess
from pathlib import Path

import pytest

from mtk import megatron_flags

REPO = Path(__file__).resolve().parents[3]
PRODUCT = ("mtk/", "launcher/", "containers/", "slurm/", "k8s/", "data_jobs/", "training/")
TABLE_DIR = "mtk/megatron_flags/"
# files that may spell Megatron-LM flags, and why
OTHER_PROGRAMS = {
    "data_jobs/preprocess_cli.py": "Megatron-LM's tools/preprocess_data.py flags (another program, mtk reads them)",
}
IMPORTER = "launcher/megatron_import/"
# the importer reads a Megatron-LM command back: where it must spell a flag the table cannot hold, and how narrowly
READERS = ("readers of table rows that need several flags at once, as Megatron-LM's validate_args does: only flags "
           "the table has a row for")
IMPORTER_FLAGS = {
    "flag_classes.py": "Megatron-LM's flags by class, for those mtk does not map (ignored or refused, each with why) "
                       "and the paths and fixed rows it reads with care; classify() asks the table first, so an "
                       "entry here never overrides a row (test_every_flag_has_a_class_and_the_table_is_asked_first)",
    "flags.py": f"{READERS} (samples into iterations, GQA, fp8, --mock-data over --data-path, --load against --save)",
    "batch_flags.py": f"{READERS} (a batch-size schedule against the iteration counts)",
}


def _importer_may_spell(path: str, flag: str) -> bool:
    """Whether the importer's file ``path`` may spell ``flag`` (see :data:`IMPORTER_FLAGS`); flag names only, never
    a megatron-core keyword or a recorded argument."""
    from mtk.launcher.megatron_import.flag_classes import table_row

    name = path.removeprefix(IMPORTER)
    return name == "flag_classes.py" or (name in IMPORTER_FLAGS and table_row(flag) is not None)


# callables the engine configures megatron-core with: every setting must arrive as **megatron_flags.core_kwargs
CONFIGURED = {*megatron_flags.TARGETS}
# set on a built config by the training loop (callables it wires, as Megatron-LM's loop does) or by the pre-submit
# check (a meta-device build initialises nothing): not settings of the job
RUNTIME_HOOKS = {"no_sync_func", "grad_sync_func", "param_sync_func", "finalize_model_grads_func", "grad_scale_func",
                 "perform_initialization"}


def _product_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout  # new files too, before they are added
    return sorted({f for f in out.split() if f.startswith(PRODUCT) and not f.startswith(TABLE_DIR)
                   and (REPO / f).is_file()})


@pytest.fixture(scope="module")
def megatron_names() -> dict[str, set[str]]:
    import typing

    if not hasattr(typing, "override"):  # megatron.training uses Python 3.12's typing.override
        typing.override = lambda f: f  # type: ignore[attr-defined]
    from mtk.training import compat

    compat.install()
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    flags = {o for o in parser._option_string_actions if o.startswith("--")} - {"--help"}
    dests = {a.dest for a in parser._actions} - {"help"}
    fields = {f.name for cls in (TransformerConfig, OptimizerConfig, DistributedDataParallelConfig)
              for f in dataclasses.fields(cls)}
    targets = {t.partition(".")[2] for f in megatron_flags.FLAGS for t in f.core}
    targets |= {t.partition(".")[2] for d in megatron_flags.DERIVED for t in d.core}
    return {"flags": flags, "dests": dests, "fields": fields, "core": fields | targets}


def _callee(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def _own_options(tree: ast.AST) -> set[int]:
    """ids of the string constants that name mtk's own command-line options (argparse/click definitions)."""
    return {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
            and _callee(node) in ("add_argument", "option") for arg in node.args}


def violations(path: str, text: str, names: dict[str, set[str]]) -> list[str]:
    """Where ``text`` (the file at ``path``) spells a Megatron name outside the table."""
    tree = ast.parse(text)
    own = _own_options(tree)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in own \
                and node.value.partition("=")[0] in names["flags"] and path not in OTHER_PROGRAMS \
                and not (path.startswith(IMPORTER) and _importer_may_spell(path, node.value.partition("=")[0])):
            out.append(f"{path}:{node.lineno}: the flag {node.value!r}")
        if isinstance(node, ast.Call):
            callee = _callee(node)
            named = {k.arg for k in node.keywords if k.arg}
            if callee in CONFIGURED:
                out += [f"{path}:{node.lineno}: {callee}({k}=...)" for k in sorted(named & names["core"])]
            elif callee in ("update", "dict"):
                out += [f"{path}:{node.lineno}: {callee}({k}=...) of a config" for k in sorted(named & names["fields"])]
            elif callee == "Namespace":
                out += [f"{path}:{node.lineno}: Namespace({k}=...)" for k in sorted(named & names["dests"])]
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)):
                        continue
                    owner = t.value.id
                    if owner == "args" and t.attr in names["dests"]:
                        out.append(f"{path}:{node.lineno}: args.{t.attr} = ...")
                    if owner.endswith("config") and t.attr in names["fields"] - RUNTIME_HOOKS:
                        out.append(f"{path}:{node.lineno}: {owner}.{t.attr} = ...")
    return out


@pytest.mark.megatron  # Megatron-LM's parser and megatron-core's config classes (the module fixture)
def test_no_megatron_name_is_typed_outside_the_table(megatron_names):
    files = _product_files()
    assert any(f.startswith(IMPORTER) for f in files) and (REPO / IMPORTER / "flags.py").is_file()
    found = [v for f in files for v in violations(f, (REPO / f).read_text(), megatron_names)]
    assert found == [], "read these from mtk.megatron_flags (add a row where none exists):\n" + "\n".join(found)


@pytest.mark.megatron  # the module fixture
def test_the_scan_finds_each_kind_of_hand_mapping(megatron_names):
    """The scan is real: each way a name used to be typed by hand — the args writer's flag literals, the engine's
    config keywords and setters, a recorded Namespace field, a setter on the built config — is reported."""
    hand = '''
import argparse
argv = ["--ckpt-format", "torch_dist", "--save-interval=5"]
kw = dict(recompute_granularity="full")
kw.update(fp8="hybrid")
TransformerConfig(num_layers=2, **rest)
ps.initialize_model_parallel(tensor_model_parallel_size=2)
OptimizerParamScheduler(opt, lr_warmup_steps=8)
args = argparse.Namespace(ckpt_format="torch_dist")
args.lr_warmup_iters = 3
config.overlap_param_gather = True
config.no_sync_func = hook
parser.add_argument("--seed")
'''
    found = violations("training/example.py", hand, megatron_names)
    assert sorted(v.split(": ", 1)[1] for v in found) == sorted([
        "the flag '--ckpt-format'", "the flag '--save-interval=5'", "dict(recompute_granularity=...) of a config",
        "update(fp8=...) of a config", "TransformerConfig(num_layers=...)",
        "initialize_model_parallel(tensor_model_parallel_size=...)", "OptimizerParamScheduler(lr_warmup_steps=...)",
        "Namespace(ckpt_format=...)", "args.lr_warmup_iters = ...", "config.overlap_param_gather = ..."])
    # the importer's exemptions are narrow: a flag without a row in its readers, a hand default elsewhere in the
    # package, a megatron-core keyword — each reported
    from mtk.launcher.megatron_import.flag_classes import table_row

    unmapped = min(f for f in megatron_names["flags"] if table_row(f) is None)  # a flag the table has no row for
    importer = f'''
SPECIAL = {{"{unmapped}": reader, "--train-samples": reader}}
DEFAULTS = {{"--lr-decay-style": "linear"}}
TransformerConfig(num_layers=2)
'''
    found = [v for name in ("flags.py", "entry.py") for v in violations(IMPORTER + name, importer, megatron_names)]
    assert sorted(found) == sorted([
        f"{IMPORTER}flags.py:2: the flag {unmapped!r}", f"{IMPORTER}flags.py:4: TransformerConfig(num_layers=...)",
        f"{IMPORTER}entry.py:2: the flag {unmapped!r}", f"{IMPORTER}entry.py:2: the flag '--train-samples'",
        f"{IMPORTER}entry.py:3: the flag '--lr-decay-style'",
        f"{IMPORTER}entry.py:4: TransformerConfig(num_layers=...)"])
