"""mtk's own checkpoint, and hostile copies of it, through the paths a user takes (issues 43, 49): `mtk launch`
with the local backend on a resume, and torchrun started directly (every rank checks).

The real checkpoint's pickles hold only admitted globals and opcodes and it resumes; a copy with one object swapped
for an ``os.system`` payload, an opcode attack (NEWOBJ_EX on a storage class, a numpy object dtype with its flags
cleared, BUILD on a class) or a shard path leaving the dir is refused by name (exit 2): the marker the payload would
write stays absent, the process survives (a crash would be a signal), no path moves."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import hostile_checkpoint as hostile
from support.hostile_checkpoint import assert_admitted, census, plant, touching

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")
NEVER = "which a checkpoint never holds; refusing to load it"


def mtk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=900)


def launch(runs: Path, name: str, iterations: int) -> subprocess.CompletedProcess:
    return mtk("launch", TINY, "--backend", "local", "--set", f"name={name}", "--set", f"cluster.runs_dir={runs}",
               "--set", f"train.iterations={iterations}", "--set", "train.checkpoint.save_interval=2",
               "--set", "train.lr_warmup_iters=1")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A tiny local run of 2 iterations that checkpoints at 2: its checkpoint dir."""
    runs = tmp_path_factory.mktemp("runs")
    out = launch(runs, "safe", 2)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ckpt = runs / "safe" / "checkpoints"
    assert (ckpt / "iter_0000002" / ".metadata").is_file(), sorted(ckpt.iterdir())
    return ckpt


def _hostile(tmp_path: Path, saved: Path, key: str) -> tuple[Path, Path, Path]:
    """A runs dir whose job `evil` resumes a copy of ``saved`` with the object under ``key`` planted."""
    runs = tmp_path / "runs"
    shutil.copytree(saved, runs / "evil" / "checkpoints")
    iter_dir = runs / "evil" / "checkpoints" / "iter_0000002"
    marker = tmp_path / "ran"
    with open(iter_dir / ".metadata", "rb") as fh:
        keys = sorted(pickle.load(fh).state_dict_metadata)  # the test's own checkpoint
    stored = next(k for k in keys if k.startswith(key))
    obj = [{"iteration": 2, "args": touching(marker)}] if key == "common_state" else [touching(marker)]
    return runs, plant(iter_dir, stored, obj), marker


def test_mtks_own_checkpoint_names_only_admitted_globals_and_resumes(saved, tmp_path):
    found = census(saved / "iter_0000002")
    assert found["objects"] and found["metadata"] and found["tensors"]
    assert_admitted(found)
    runs = tmp_path / "runs"
    shutil.copytree(saved, runs / "again" / "checkpoints")
    out = launch(runs, "again", 3)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_dir = next(runs.glob("again-*"))
    trained = [json.loads(ln)["iteration"] for ln in (run_dir / "metrics.jsonl").read_text().splitlines()
               if json.loads(ln).get("kind") == "train"]
    assert trained == [3], trained  # resumed at 2, trained 3


def test_mtk_launch_refuses_a_planted_common_state_before_submitting(saved, tmp_path):
    runs, _, marker = _hostile(tmp_path, saved, "common_state")
    out = launch(runs, "evil", 3)
    said = out.stdout + out.stderr
    iter_dir = runs / "evil" / "checkpoints" / "iter_0000002"
    assert out.returncode == 2, said[-3000:]
    assert f"train.checkpoint.dir: {iter_dir}: the common state holds posix.system, {NEVER}" in said, said
    assert "Traceback" not in said and not list(runs.glob("evil-*")), "a refused launch writes no run dir"
    assert not marker.exists()


LAUNCH_ATTACKS = {  # id: (where, payload, what the one line says)
    "storage-kwargs": ("common_state", hostile.storage_with_kwargs, "the common state holds pickle opcode NEWOBJ_EX"),
    "object-array": ("common_state", hostile.object_array_from_bytes,
                     "the common state holds numpy.dtype('O', False, True)"),
    "class-build": (".metadata", None, "the checkpoint metadata holds BUILD on pathlib.PosixPath itself"),
    "dot-dot": ("relative_path", None, "shard path '../../../outside.distcp' leaves the checkpoint dir"),
}


@pytest.mark.parametrize("attack", sorted(LAUNCH_ATTACKS))
def test_mtk_launch_refuses_an_opcode_attack_or_an_escaping_shard_in_one_line(saved, tmp_path, attack):
    """`mtk launch`'s resume check (before anything is submitted) in its own process: exit 2, one line naming the
    file; a crash would be a signal. BUILD on PosixPath would have made every path the launch writes the file's."""
    runs = tmp_path / "runs"
    shutil.copytree(saved, runs / "evil" / "checkpoints")
    iter_dir = runs / "evil" / "checkpoints" / "iter_0000002"
    where, make, said = LAUNCH_ATTACKS[attack]
    chosen = tmp_path / "chosen-by-the-file"
    (tmp_path / "outside.distcp").write_bytes(b"not yours")
    if where == ".metadata":
        (iter_dir / ".metadata").write_bytes(hostile.class_attribute_set("pathlib", "PosixPath", "_str", str(chosen)))
    elif where == "relative_path":
        hostile.point_shard(iter_dir, "common_state/shard_0_1", "../../../outside.distcp")
    else:
        hostile.plant_bytes(iter_dir, "common_state/shard_0_1", hostile.torch_file(make()))
    out = launch(runs, "evil", 3)
    said_all = out.stdout + out.stderr
    assert out.returncode == 2, (out.returncode, said_all[-3000:])
    line = f"train.checkpoint.dir: {iter_dir}"
    assert line in said_all and said in said_all and "Traceback" not in said_all, said_all[-3000:]
    assert not list(runs.glob("evil-*")) and not chosen.exists(), "a refused launch writes nothing, anywhere"


def test_the_node_step_refuses_a_planted_rng_state_before_torchrun(saved, tmp_path):
    """The launch reads only the common state; the node's precheck walks every object the ranks will load."""
    runs, shard, marker = _hostile(tmp_path, saved, "rng_state")
    out = launch(runs, "evil", 3)
    said = out.stdout + out.stderr
    assert f"{shard}: the rng_state holds posix.system, {NEVER}" in said, said[-3000:]
    assert "train: FAILED exit=2" in said and out.returncode != 0, said[-3000:]
    assert not marker.exists()


def test_ranks_started_directly_refuse_it_and_run_nothing(saved, tmp_path):
    """torchrun without the node step: megatron-core's reads on each rank go through mtk's reader. The rng_state
    object of one rank holds the numpy attack (SIGSEGV in a plain reader): that rank's refusal reaches every rank
    (DCP gathers the read step), and each says it in one line instead of crashing."""
    runs = tmp_path / "runs"
    shutil.copytree(saved, runs / "evil" / "checkpoints")
    iter_dir = runs / "evil" / "checkpoints" / "iter_0000002"
    with open(iter_dir / ".metadata", "rb") as fh:
        rng = sorted(k for k in pickle.load(fh).state_dict_metadata if k.startswith("rng_state"))[0]
    shard = hostile.plant_bytes(iter_dir, rng, hostile.torch_file(hostile.object_array_from_bytes()))
    job = json.loads(next(saved.parent.parent.glob("safe-*/job.json")).read_text())
    job["train"]["checkpoint"]["dir"] = str(runs / "evil" / "checkpoints")
    job["train"]["iterations"] = 3
    run_dir = tmp_path / "direct"
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps(job))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          "-m", "mtk.training.worker", "--job", str(run_dir / "job.json"), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, timeout=900, cwd=run_dir,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    said = out.stdout + out.stderr
    assert out.returncode != 0 and "Signals.SIGSEGV" not in said and "exitcode  : -11" not in said, said[-3000:]
    refusal = f"[mtk] error: {shard}: the rng_state holds numpy.dtype('O', False, True)"
    assert refusal in said, said[-3000:]
