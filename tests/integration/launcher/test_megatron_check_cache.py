"""The megatron-core check runs once per model/parallel/train: `mtk validate` / `mtk launch` say whether it ran
(a real child process importing megatron.core) or its verdict came from the cache, a changed model field runs it
again, a changed path or Slurm time does not, and a damaged cache entry is ignored and rewritten. Each test has
its own empty cache ($XDG_CACHE_HOME in a temp dir)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from mtk.launcher import megatron_cache
from mtk.launcher.cli import cli

from mtk.spec import load_job
from mtk.vocabulary import built

pytestmark = [pytest.mark.integration, pytest.mark.megatron]  # megatron-core runs in the check's child

TINY = str(Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml")
RAN = "megatron-core check: ran in "
CACHED = "megatron-core check: verdict from the cache"


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "xdg-cache"
    monkeypatch.delenv("MTK_CACHE_DIR", raising=False)  # the suite's own cache (tests/conftest.py) would win
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home / "mtk" / "megatron-check"


def _mtk(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _validate(*sets: str, flags: tuple[str, ...] = ()) -> str:
    return _mtk("validate", TINY, "-q", "--backend", "local", *flags, *[a for s in sets for a in ("--set", s)])


def _origin(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("megatron-core check:")]
    assert len(lines) == 1, output
    return lines[0]


def test_a_changed_model_field_reruns_the_check_and_a_path_or_slurm_time_does_not(cache_home, tmp_path):
    first = _validate()
    assert _origin(first).startswith(RAN) and "imports torch + megatron.core" in _origin(first)
    assert "megatron-core's meta-device model" in first  # the figure the check produced
    entries = sorted(cache_home.glob("*.json"))
    assert len(entries) == 1

    again = _validate("data.dir=/elsewhere/data", "cluster.slurm.time=2-00:00:00", "cluster.runs_dir=/other/runs",
                      "train.checkpoint.dir=/other/ckpt", "name=renamed")
    assert _origin(again).startswith(CACHED)
    # the cached figure is the one the check produced
    size = [line for line in first.splitlines() if line.startswith("parameters per GPU:")]
    assert size and size == [line for line in again.splitlines() if line.startswith("parameters per GPU:")]

    launched = _mtk("launch", TINY, "--backend", "local", "--megatron-check", "--dry-run",
                    "--run-dir", str(tmp_path / "run"))
    assert _origin(launched).startswith(CACHED)  # validate and launch share the verdict
    assert sorted(cache_home.glob("*.json")) == entries

    # A changed model field runs it again; this one is refused, and a refusal is cached too (deterministic for its
    # key): the repeat gives the same field-named error without the child.
    changed = [CliRunner().invoke(cli, ["validate", TINY, "-q", "--set", "model.ffn_hidden_size=255"])
               for _ in range(2)]
    assert [r.exit_code for r in changed] == [2, 2]
    assert _origin(changed[0].output).startswith(RAN) and _origin(changed[1].output).startswith(CACHED)
    assert all("model.ffn_hidden_size" in r.output for r in changed)
    assert len(list(cache_home.glob("*.json"))) == 2


def test_a_corrupt_entry_is_ignored_and_rewritten_and_recheck_bypasses_the_cache(cache_home):
    job = load_job(TINY)
    material = megatron_cache.key_material(job, megatron_cache.environment(), built(job).size)
    entry = cache_home / f"{megatron_cache.key(material)}.json"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b'{"material": {"schema": 1}, "result": [tr\xffuncated')

    assert _origin(_validate()).startswith(RAN)
    assert json.loads(entry.read_text())["material"] == material  # rewritten whole
    assert _origin(_validate()).startswith(CACHED)
    assert _origin(_validate(flags=("--megatron-recheck",))).startswith(RAN)
    assert [p.name for p in cache_home.iterdir()] == [entry.name]


SPY = textwrap.dedent("""
    import json, sys, typing
    from pydantic import BaseModel
    from mtk.launcher import megatron_check
    from mtk.spec.job import Job

    # Every spec section class -> its dotted path, found from Job down: the declared types (a section left None, as
    # train.fp8, still counts) and the parsed job's values (a backend's block, e.g. cluster.slurm, comes from the
    # registry), so no section is named here by hand.
    PREFIX = {}

    def models_in(annotation):
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield annotation
        for arg in typing.get_args(annotation):
            yield from models_in(arg)

    def walk(cls, value, prefix):
        if cls in PREFIX:
            return
        PREFIX[cls] = prefix
        subs = {name: (info.annotation, getattr(value, name, None)) for name, info in cls.model_fields.items()}
        subs.update({name: (None, v) for name, v in (getattr(value, "__pydantic_extra__", None) or {}).items()})
        for name, (annotation, sub) in subs.items():
            path = f"{prefix}.{name}".lstrip(".")
            for c in {*models_in(annotation), *([type(sub)] if isinstance(sub, BaseModel) else [])}:
                walk(c, sub if isinstance(sub, c) else None, path)

    text = sys.stdin.read()
    walk(Job, Job.model_validate_json(text), "")
    reads = set()

    def spy(cls, prefix):
        original = cls.__getattribute__
        def getattribute(self, name):
            if name in type(self).model_fields:
                reads.add(f"{prefix}.{name}".lstrip("."))
            return original(self, name)
        cls.__getattribute__ = getattribute

    for cls, prefix in PREFIX.items():
        spy(cls, prefix)
    result = megatron_check.run_child(text, int(sys.argv[1]))  # the vocabulary, found by the parent as check() does
    print(json.dumps({"reads": sorted(reads), "sections": sorted(PREFIX.values()), "result": result}))
""")


def test_the_key_holds_every_spec_field_the_check_reads(tmp_path):
    """Run the check's child code with every spec section spied on: each field it reads must be in the cache key
    (else a change to it would be served a stale verdict); the key's train fields are those marked
    ``READ_BY_CHECK`` in mtk/spec/train.py, so a newly read field without the mark fails here. A GPU MoE job with
    full recompute and the distributed optimizer walks the most branches of the device plan and the model build."""
    job = load_job(TINY, ["cluster.device=gpu", "model.moe.num_experts=2", "model.add_bias_linear=false",
                          "train.recompute=full", "parallel.distributed_optimizer=true", "train.precision=bf16",
                          "train.lr_decay_iters=20"])
    proc = subprocess.run([sys.executable, "-c", SPY, str(built(job).size)], input=job.to_json(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["result"]["problems"] == [] and out["result"]["parameters_per_rank"] > 0
    reads = set(out["reads"])
    assert {"model", "model.moe", "parallel", "train", "train.fp8", "train.checkpoint", "cluster", "data",
            "resilience"} <= set(out["sections"])  # the walk from Job found the sections to spy on
    assert {"model.hidden_size", "parallel.tp", "train.lr", "cluster.device"} <= reads  # the spy saw the reads

    material = megatron_cache.spec_material(job, built(job).size)
    keyed = {f"model.{f}" for f in material["model"]} | {f"model.moe.{f}" for f in material["model"]["moe"]}
    keyed |= {f"parallel.{f}" for f in material["parallel"]} | {f"train.{f}" for f in material["train"]}
    keyed |= {f"train.fp8.{f}" for f in train_fp8_fields()}
    keyed |= {"cluster.device", "cluster.nodes", "cluster.procs_per_node"}  # world_size = nodes × procs_per_node
    # the top-level attributes leading to a section are reads of that section, not of a field of their own
    sections = {"model", "parallel", "train", "cluster", "model.moe", "train.fp8"}
    unkeyed = reads - keyed - sections
    assert unkeyed == set(), (f"the check reads {sorted(unkeyed)} but its cache key lacks them: mark a train field "
                              "json_schema_extra=READ_BY_CHECK in mtk/spec/train.py (model and parallel are keyed "
                              "whole; a cluster field joins megatron_cache.spec_material)")


def train_fp8_fields() -> set[str]:
    from mtk.spec.train import Fp8Spec

    return set(Fp8Spec.model_fields)
