"""A checkpoint dir is data other people write: a pickle in it that names a global no checkpoint holds
(``os.system``) is refused by name, exit 2, and nothing of it runs (issue 43). Every real checkpoint still
passes: Megatron-LM's own (the fixtures) here, mtk's in tests/integration/launcher/test_checkpoint_refuses_code.py.

The hostile checkpoints are real ones with one object swapped (tests/support/hostile_checkpoint.py); the payload
would create a marker file, whose absence proves nothing ran."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mtk.launcher import ckpt_precheck
from mtk.launcher.ckpt_precheck import CheckpointDamaged, check_resume_checkpoint
from support.hostile_checkpoint import census, plant, torch_bytes, touching

from mtk import checkpoint_unpickle
from mtk.spec import load_job

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")
MEGATRON_LM = ROOT / "tests" / "fixtures" / "megatron_lm"
FIXTURES = sorted(p.name for p in MEGATRON_LM.iterdir() if (p / "fixture.json").is_file())
NEVER = "which a checkpoint never holds; refusing to load it"


def _copy(tmp_path: Path, fixture: str = "plain_tp2"):
    """A run whose checkpoint dir is a copy of Megatron-LM's fixture; (job, run_dir, the tracked iteration dir)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(MEGATRON_LM / fixture / "checkpoints", ckpt)
    overrides = json.loads((MEGATRON_LM / fixture / "fixture.json").read_text())["mtk_overrides"]
    job = load_job(TINY, [*overrides, f"train.checkpoint.dir={ckpt}"])
    tracked = (ckpt / "latest_checkpointed_iteration.txt").read_text().strip()
    iter_dir = ckpt / (tracked if tracked == "release" else f"iter_{int(tracked):07d}")
    return job, str(tmp_path), iter_dir


@pytest.fixture(params=[False, True], ids=["in-memory", "in-place"])
def read_mode(request, monkeypatch):
    """Objects are read whole when small and in place (their pickle only) when large: check both."""
    if request.param:
        monkeypatch.setattr(ckpt_precheck, "_SLICE_READ", 0)
    return request.param


@pytest.mark.parametrize("fixture", FIXTURES)
def test_megatron_lms_own_checkpoints_name_only_admitted_globals_and_pass(tmp_path, fixture, read_mode):
    job, run_dir, iter_dir = _copy(tmp_path, fixture)
    found = census(iter_dir)
    assert found["objects"] and found["metadata"]
    for module, name in found["objects"]:
        assert checkpoint_unpickle.admitted(module, name, checkpoint_unpickle.CHECKPOINT_GLOBALS), (module, name)
    for module, name in found["metadata"]:
        assert checkpoint_unpickle.admitted(module, name, checkpoint_unpickle.METADATA_GLOBALS), (module, name)
    check_resume_checkpoint(job, run_dir)
    common = ckpt_precheck.read_common_state(iter_dir)
    assert common is not None and common["args"].tensor_model_parallel_size >= 1


@pytest.mark.parametrize("key,what,names_shard", [
    ("common_state/shard_0_1", "common state", False),
    ("rng_state/shard_0.0_0.2", "rng_state", True),
    ("rerun_state_machine_state/shard_0.0_0.2", "rerun_state_machine_state", True),
])
def test_a_planted_object_is_refused_by_name_and_runs_nothing(tmp_path, key, what, names_shard, read_mode):
    job, run_dir, iter_dir = _copy(tmp_path)
    marker = tmp_path / "ran"
    obj = [{"iteration": 4, "args": touching(marker)}] if what == "common state" else [touching(marker)]
    shard = plant(iter_dir, _key(iter_dir, key), obj)
    with pytest.raises(CheckpointDamaged) as err:
        check_resume_checkpoint(job, run_dir)
    where = shard if names_shard else iter_dir
    assert str(err.value).startswith(f"{where}: the {what} holds posix.system, {NEVER}"), str(err.value)
    assert "\n" not in str(err.value) and err.value.exit_code == 2
    assert not marker.exists()


def _key(iter_dir: Path, prefix: str) -> str:
    """The stored key starting like ``prefix`` (the shard suffix depends on the writer's layout)."""
    with open(iter_dir / ".metadata", "rb") as fh:
        meta = pickle.load(fh)  # the suite's own fixture
    if prefix in meta.state_dict_metadata:
        return prefix
    return sorted(k for k in meta.state_dict_metadata if k.startswith(prefix.split("/")[0] + "/"))[0]


def test_a_legacy_common_pt_is_refused_by_name_and_runs_nothing(tmp_path):
    """megatron-core reads ``common.pt`` instead of the common state shard when it exists."""
    job, run_dir, iter_dir = _copy(tmp_path)
    marker = tmp_path / "ran"
    (iter_dir / "common.pt").write_bytes(torch_bytes({"iteration": 4, "args": touching(marker)}))
    with pytest.raises(CheckpointDamaged) as err:
        check_resume_checkpoint(job, run_dir)
    assert str(err.value).startswith(f"{iter_dir / 'common.pt'}: the common state holds posix.system, {NEVER}")
    assert not marker.exists()
    with pytest.raises(CheckpointDamaged):
        ckpt_precheck.read_common_state(iter_dir)
    assert not marker.exists()


def test_a_hostile_metadata_is_refused_by_name_and_runs_nothing(tmp_path):
    """torch reads ``.metadata`` with plain pickle.load; the precheck does not."""
    job, run_dir, iter_dir = _copy(tmp_path)
    marker = tmp_path / "ran"
    (iter_dir / ".metadata").write_bytes(pickle.dumps(touching(marker)))
    with pytest.raises(CheckpointDamaged) as err:
        check_resume_checkpoint(job, run_dir)
    assert str(err.value).startswith(f"{iter_dir / '.metadata'}: the checkpoint metadata holds posix.system, {NEVER}")
    assert not marker.exists()


def test_megatron_lms_legacy_model_optim_rng_is_never_unpickled(tmp_path):
    """mtk has no reader of Megatron-LM's pre-torch_dist ``mp_rank_*/model_optim_rng.pt``: the precheck names the
    dir as not a torch_dist checkpoint without opening the file."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "iter_0000010" / "mp_rank_00").mkdir(parents=True)
    marker = tmp_path / "ran"
    (ckpt / "iter_0000010" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(torch_bytes({"args": touching(marker)}))
    (ckpt / "latest_checkpointed_iteration.txt").write_text("10\n")
    with pytest.raises(CheckpointDamaged, match="is not a complete torch_dist checkpoint"):
        check_resume_checkpoint(load_job(TINY, [f"train.checkpoint.dir={ckpt}"]), str(tmp_path))
    assert not marker.exists()


def test_the_node_step_refuses_it_in_one_line_exit_2_before_torchrun(tmp_path):
    """``mtk-entrypoint train`` (the step every backend runs on a node) checks before it builds torchrun's argv."""
    job, _, iter_dir = _copy(tmp_path)
    marker = tmp_path / "ran"
    plant(iter_dir, "common_state/shard_0_1", [{"iteration": 4, "args": touching(marker)}])
    (tmp_path / "job.json").write_text(job.to_json())
    out = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "train", "--job", str(tmp_path / "job.json"),
                          "--print"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{iter_dir}: the common state holds posix.system, {NEVER}" in lines[0], out.stderr
    assert "torchrun" not in out.stdout and not marker.exists()


def test_the_allowlist_refuses_what_checkpoints_never_hold():
    for module, name in [("os", "system"), ("posix", "system"), ("builtins", "eval"), ("builtins", "getattr"),
                         ("subprocess", "Popen"), ("torch", "load"), ("megatron.core.utils", "get_model_config"),
                         ("torch", "Storage.__init__"), ("torch.storage", "_load_from_bytes")]:
        assert not checkpoint_unpickle.admitted(module, name, checkpoint_unpickle.CHECKPOINT_GLOBALS), (module, name)
        assert not checkpoint_unpickle.admitted(module, name, checkpoint_unpickle.METADATA_GLOBALS), (module, name)


class _Nested:
    """Reduces to ``torch.storage._load_from_bytes(bytes)``: a nested torch.load without weights_only."""

    def __init__(self, inner: bytes) -> None:
        self.inner = inner

    def __reduce__(self):
        import torch

        return (torch.storage._load_from_bytes, (self.inner,))


def test_a_nested_torch_load_is_refused_and_runs_nothing(tmp_path):
    job, run_dir, iter_dir = _copy(tmp_path)
    marker = tmp_path / "ran"
    plant(iter_dir, "common_state/shard_0_1", [{"iteration": 4, "args": _Nested(torch_bytes(touching(marker)))}])
    # torch's own name for it, or megatron-core's replacement once megatron is imported in this process (it patches
    # torch.storage._load_from_bytes): neither is admitted
    with pytest.raises(CheckpointDamaged, match=r"the common state holds (torch\.storage\._load_from_bytes|"
                                                r"megatron\.core\.safe_globals\.safe_load_from_bytes), "):
        check_resume_checkpoint(job, run_dir)
    with pytest.raises(CheckpointDamaged, match="_load_from_bytes"):
        ckpt_precheck.read_common_state(iter_dir)
    assert not marker.exists()
