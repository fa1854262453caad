"""The megatron-core check's verdict cache, without megatron-core: what its key holds (the spec fields the check
reads, the versions of what it runs), what it leaves out (paths, Slurm time, names), where it lives, and that a
damaged entry reads as absent instead of failing the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mtk.launcher import megatron_cache as cache

from mtk.spec import load_job

TINY = str(Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml")
VOCAB = 1024  # examples/tiny.yaml: mock data, so the tiny preset's model.vocab_size is the built vocabulary
ENV = {"versions": {"mtk": "0.1.0", "megatron-core": "0.19.2", "torch": "2.13.0", "transformer-engine": None,
                    "apex": None}, "python": "3.11", "mtk_source": "abc"}


def _key(*sets: str, env: dict | None = None) -> str:
    return cache.key(cache.key_material(load_job(TINY, list(sets)), env or ENV, VOCAB))


@pytest.mark.parametrize("dist", ["mtk", "megatron-core", "torch"])
def test_a_version_change_gives_another_key(dist):
    env = json.loads(json.dumps(ENV))
    env["versions"][dist] = "9.9.9"
    assert _key(env=env) != _key()


def test_an_edit_of_mtks_source_gives_another_key():
    """A source checkout keeps its version number while the check's code changes under it."""
    assert _key(env={**ENV, "mtk_source": "def"}) != _key()


@pytest.mark.parametrize("change", [
    "name=other-name", "data.dir=/elsewhere/data", "cluster.runs_dir=/elsewhere/runs",
    "cluster.slurm.time=2-00:00:00", "train.checkpoint.dir=/elsewhere/ckpt", "train.checkpoint.save_interval=5",
    "train.log_interval=7", "train.seed=7", "image.tag=v2", "cluster.env={NCCL_DEBUG: INFO}",
])
def test_a_field_the_check_does_not_read_keeps_the_key(change):
    assert _key(change) == _key()


@pytest.mark.parametrize("change", [
    "model.num_layers=4", "model.hidden_size=128", "model.vocab_size=1000", "parallel.tp=1",
    "parallel.distributed_optimizer=true", "train.lr_warmup_iters=5", "train.iterations=40",
    "train.precision=bf16", "train.recompute=selective", "cluster.device=gpu", "cluster.procs_per_node=4",
])
def test_a_field_the_check_reads_changes_the_key(change):
    assert _key(change) != _key()


def test_the_keyed_train_fields_are_those_marked_in_the_spec():
    """The key holds the train fields marked READ_BY_CHECK beside their declaration (no list kept here): the
    integration test that spies on the check's reads fails for a read field without the mark."""
    from mtk.spec.train import READ_BY_CHECK, TrainSpec, read_by_check

    marked = {name for name, info in TrainSpec.model_fields.items() if info.json_schema_extra == READ_BY_CHECK}
    assert set(cache.spec_material(load_job(TINY), VOCAB)["train"]) == marked == set(read_by_check())
    assert {"lr", "global_batch_size", "precision"} <= marked and not {"seed", "log_interval"} & marked


def test_world_size_not_its_factors_is_the_key():
    """The check reads nodes × procs_per_node (the fake world's size), not how it is split over nodes."""
    assert _key("cluster.nodes=2", "cluster.procs_per_node=1") == _key()


def test_environment_reads_installed_versions_without_importing_torch():
    """Versions come from the distributions' metadata: a fresh interpreter computing the key imports neither
    torch nor megatron (that import is what the cache saves)."""
    import subprocess
    import sys

    code = ("import json, sys; from mtk.launcher import megatron_cache as c; env = c.environment(); "
            "print(json.dumps([env, sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron'))]))")
    env, heavy = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True, timeout=120).stdout)
    assert heavy == []
    assert set(env["versions"]) == set(cache.DISTRIBUTIONS)
    assert env["versions"]["mtk"] and env["versions"]["megatron-core"] and env["versions"]["torch"]
    assert len(env["mtk_source"]) == 16


def test_cache_dir_follows_mtk_cache_dir_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("MTK_CACHE_DIR", str(tmp_path / "own"))
    assert cache.cache_dir() == tmp_path / "own" / "megatron-check"
    monkeypatch.delenv("MTK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "mtk" / "megatron-check"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # the XDG spec: relative paths are ignored
    assert cache.cache_dir() == Path.home() / ".cache" / "mtk" / "megatron-check"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == Path.home() / ".cache" / "mtk" / "megatron-check"


def _stored(tmp_path: Path) -> tuple[Path, dict]:
    material = cache.key_material(load_job(TINY), ENV, VOCAB)
    path = tmp_path / f"{cache.key(material)}.json"
    assert cache.store(path, material, {"problems": [("model.hidden_size", "refused")],
                                        "parameters_per_rank": None}, 3.25) is None
    return path, material


def test_a_stored_verdict_reads_back(tmp_path):
    path, material = _stored(tmp_path)
    assert cache.load(path, material) == {"problems": [["model.hidden_size", "refused"]],
                                          "parameters_per_rank": None, "seconds": 3.25}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left beside it


@pytest.mark.parametrize("damage", [
    b"", b"{not json", b"\xff\xfe\x00garbage", b"[]", b"null",
    b'{"material": "other", "seconds": 1, "result": {"problems": [], "parameters_per_rank": 5}}',
])
def test_a_damaged_entry_reads_as_absent(tmp_path, damage):
    path, material = _stored(tmp_path)
    path.write_bytes(damage)
    assert cache.load(path, material) is None


@pytest.mark.parametrize("field", ["problems", "parameters_per_rank", "seconds"])
def test_an_entry_with_a_field_of_the_wrong_shape_reads_as_absent(tmp_path, field):
    path, material = _stored(tmp_path)
    entry = json.loads(path.read_text())
    if field == "seconds":
        entry["seconds"] = "fast"
    else:
        entry["result"][field] = [["only-one"]] if field == "problems" else "many"
    path.write_text(json.dumps(entry))
    assert cache.load(path, material) is None


def test_an_entry_for_other_material_reads_as_absent(tmp_path):
    """The entry holds its full material: a file that landed under the wrong name is not trusted."""
    path, _ = _stored(tmp_path)
    other = cache.key_material(load_job(TINY, ["model.num_layers=4"]), ENV, VOCAB)
    assert cache.load(path, other) is None


def test_a_missing_or_unreadable_entry_reads_as_absent(tmp_path):
    material = cache.key_material(load_job(TINY), ENV, VOCAB)
    assert cache.load(tmp_path / "missing.json", material) is None
    (tmp_path / "dir.json").mkdir()
    assert cache.load(tmp_path / "dir.json", material) is None


def test_an_unwritable_cache_says_why_instead_of_failing(tmp_path):
    (tmp_path / "file").write_text("a file where the cache dir would go")
    material = cache.key_material(load_job(TINY), ENV, VOCAB)
    note = cache.store(tmp_path / "file" / "entry.json", material, {"problems": [], "parameters_per_rank": 1}, 1.0)
    assert note is not None and note.startswith("not cached")


@pytest.mark.parametrize(("verb", "off"), [("validate", "--no-megatron"), ("launch", "--no-megatron-check")])
def test_recheck_with_the_check_turned_off_is_refused(verb, off, tmp_path):
    from click.testing import CliRunner
    from mtk.launcher.cli import cli

    extra = ["--dry-run", "--run-dir", str(tmp_path / "run")] if verb == "launch" else ["-q"]
    result = CliRunner().invoke(cli, [verb, TINY, "--megatron-recheck", off, *extra])
    assert result.exit_code == 2
    assert "--megatron-recheck" in result.output and off in result.output


def test_installed_versions_read_from_dist_info_names_equal_importlib_metadata():
    from importlib import metadata

    for dist, version in cache.installed_versions().items():
        try:
            expected = metadata.version(dist)
        except metadata.PackageNotFoundError:
            expected = None
        assert version == expected, dist
    assert cache.installed_versions()["torch"]  # the test environment has torch: a real lookup, not all None
