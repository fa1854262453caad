"""A checkpoint dir is data other people write: a pickle in it that names a global no checkpoint holds
(``os.system``, issue 43) or uses an opcode as an attack (NEWOBJ_EX with keyword arguments, a numpy dtype's flags
rewritten, BUILD on a class: issue 49) is refused by name, exit 2, and nothing of it runs; a shard path that leaves
the dir is refused and nothing outside is opened or stat'ed. Every real checkpoint still passes: Megatron-LM's own
(the fixtures) here, mtk's in tests/integration/launcher/test_checkpoint_refuses_code.py.

The hostile checkpoints are real ones with one object swapped (tests/support/hostile_checkpoint.py); a payload
would create a marker file, whose absence proves nothing ran, or crash the process (SIGSEGV): those run in a child,
so that a regression is a failed test, not a crashed pytest."""

from __future__ import annotations

import io
import json
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from mtk.launcher import ckpt_precheck
from mtk.launcher.ckpt_precheck import CheckpointDamaged, check_resume_checkpoint
from support import hostile_checkpoint as hostile
from support.fs_witness import inside, touched
from support.hostile_checkpoint import assert_admitted, census, plant, torch_bytes, touching

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
    assert found["objects"] and found["metadata"] and found["tensors"]
    assert_admitted(found)
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


# -- issue 49: the opcodes are the attack surface -----------------------------------------------------------------
OPCODE_ATTACKS = {
    # id: (where the file goes, the crafted pickle, what the refusal names)
    # .metadata admits no storage class at all: the global is refused before its opcode
    "storage-kwargs-in-metadata": (".metadata", hostile.storage_with_kwargs,
                                   "the checkpoint metadata holds torch.UntypedStorage"),
    "storage-kwargs-in-common-state": ("common_state/shard_0_1", hostile.storage_with_kwargs,
                                       "the common state holds pickle opcode NEWOBJ_EX"),
    "object-array-in-common-state": ("common_state/shard_0_1", hostile.object_array_from_bytes,
                                     "the common state holds numpy.dtype('O', False, True)"),
    "object-array-in-rng-state": ("rng_state", hostile.object_array_from_bytes,
                                  "the rng_state holds numpy.dtype('O', False, True)"),
    "class-build-in-metadata": (".metadata", None, "the checkpoint metadata holds BUILD on pathlib.PosixPath itself"),
    "class-build-in-common-state": ("common_state/shard_0_1", None,
                                    "the common state holds BUILD on argparse.Namespace itself"),
}


def _plant_attack(tmp_path: Path, attack: str) -> tuple[Any, Path, Path]:
    """A copy of Megatron-LM's checkpoint with the attack planted; (job, iter dir, the dir a class payload names)."""
    job, _, iter_dir = _copy(tmp_path)
    where, make, _ = OPCODE_ATTACKS[attack]
    chosen = tmp_path / "chosen-by-the-file"
    if make is None:  # BUILD on a class: PosixPath in .metadata (admitted there), Namespace in a torch object
        payload = (hostile.class_attribute_set("pathlib", "PosixPath", "_str", str(chosen)) if where == ".metadata"
                   else hostile.class_attribute_set("argparse", "Namespace", "tensor_model_parallel_size", "x"))
    else:
        payload = make()
    if where == ".metadata":
        (iter_dir / ".metadata").write_bytes(payload)
    else:
        hostile.plant_bytes(iter_dir, _key(iter_dir, where), hostile.torch_file(payload))
    return job, iter_dir, chosen


@pytest.mark.parametrize("attack", sorted(OPCODE_ATTACKS))
def test_an_opcode_attack_is_refused_by_the_node_step_in_one_line_exit_2(tmp_path, attack):
    """The node step (``mtk-entrypoint train``, the resume precheck every backend runs) in a child: a crash would be
    a signal, not exit 2."""
    job, iter_dir, chosen = _plant_attack(tmp_path, attack)
    (tmp_path / "job.json").write_text(job.to_json())
    out = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "train", "--job", str(tmp_path / "job.json"),
                          "--print"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:] + out.stderr[-3000:])
    lines = out.stderr.strip().splitlines()
    said = OPCODE_ATTACKS[attack][2]
    assert len(lines) == 1 and said in lines[0] and NEVER in lines[0], out.stderr
    assert str(iter_dir) in lines[0], lines[0]  # the file is named: the dir, or the object's shard in it
    assert "torchrun" not in out.stdout and not chosen.exists()


def test_a_class_payload_would_redirect_every_path_without_mtks_reader(tmp_path):
    """What BUILD on a class does to a plain unpickler (DCP's ``pickle.load`` of ``.metadata``): every Path in the
    process becomes the file's string. The payload the tests above refuse is that attack."""
    chosen = tmp_path / "chosen-by-the-file"
    payload = hostile.class_attribute_set("pathlib", "PosixPath", "_str", str(chosen))
    code = ("import pickle, sys; from pathlib import Path; pickle.loads(sys.stdin.buffer.read()); "
            "print(str(Path('/any/where')))")
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    assert out.returncode == 0 and out.stdout.decode().strip() == str(chosen), out


@pytest.mark.parametrize("payload,reader", [
    ("storage_with_kwargs", "pickle.loads(data)"),  # DCP's read_metadata
    ("object_array_from_bytes", "torch.load(io.BytesIO(hostile.torch_file(data)), weights_only=False)"),  # load_bytes
])
def test_a_crash_payload_kills_a_plain_reader(payload, reader):
    """The crafted files are the attacks: torch's and pickle's own readers die of them (SIGSEGV), at the address
    the file chose. mtk's reader refuses the same bytes (above), in one line."""
    code = (f"import io, pickle, sys, torch; sys.path.insert(0, {str(ROOT / 'tests')!r}); "
            f"from support import hostile_checkpoint as hostile; data = hostile.{payload}(); {reader}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300,
                         preexec_fn=_no_core_dump)
    assert out.returncode == -signal.SIGSEGV, (out.returncode, out.stderr[-2000:])


def _no_core_dump() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# Each line: a crafted pickle through one of mtk's readers, in a child (some would crash a reader that ran them).
MACHINE = r"""
import io, json, sys, zipfile
sys.path.insert(0, sys.argv[1])
from support import hostile_checkpoint as h
from mtk import checkpoint_unpickle as cu

def metadata(data):
    return cu.load_metadata(data, "F")

def objects(data):
    return cu.load_torch(h.torch_file(data), "F", "common state")

def tensor(data):
    return cu.load_tensor(h.torch_file(data), "F")

def extra_state(data):
    import torch
    return cu.check_extra_state(torch.frombuffer(bytearray(data), dtype=torch.uint8), "F")

P = h.PROTO4
cases = {
    "inst": (metadata, P + b"(" + b"ios\nsystem\n" + h.op_str("true") + b"."),
    "obj": (objects, P + b"(" + h.op_global("argparse", "Namespace") + b"o."),
    "ext1": (metadata, P + b"\x82\x01."),
    "text-persid": (objects, P + b"Pstorage\n."),
    "persid-in-metadata": (metadata, P + h.op_tuple(h.op_str("storage")) + b"Q."),
    "newobj-ex": (metadata, P + h.op_global("torch.distributed.checkpoint.metadata", "Metadata") + h.op_tuple()
                  + h.op_dict(version=h.op_str("x")) + h.NEWOBJ_EX + b"."),
    "reduce-a-dtype": (objects, P + h.op_global("torch", "float32") + h.op_tuple() + h.REDUCE + b"."),
    "append-into-a-dict": (objects, P + b"}" + h.op_int(1) + b"a."),
    "setitem-into-a-namespace": (objects, P + h.op_global("argparse", "Namespace") + b")\x81"
                                 + h.op_str("k") + h.op_int(1) + b"s."),
    "build-a-dict": (objects, P + b"}" + b"}" + h.BUILD + b"."),
    "namespace-dunder": (objects, P + h.op_global("argparse", "Namespace") + b")\x81"
                         + h.op_dict(__class__=h.op_str("x")) + h.BUILD + b"."),
    "dtype-flags": (objects, P + h.op_global("numpy", "dtype") + h.op_tuple(h.op_str("u4"), h.NEWFALSE, h.NEWTRUE)
                    + h.REDUCE + h.op_tuple(h.op_int(3), h.op_str("<"), h.NONE, h.NONE, h.NONE, h.op_int(-1),
                                            h.op_int(-1), h.op_int(63)) + h.BUILD + b"."),
    "size-of-an-array": (objects, h.object_array_from_bytes()),
    "storage-called": (objects, P + h.op_global("torch", "FloatStorage") + h.op_tuple(h.op_int(8)) + h.REDUCE + b"."),
    "global-in-tensor": (tensor, P + h.op_global("argparse", "Namespace") + b")\x81."),
    "os-system-in-extra-state": (extra_state, P + h.op_global("os", "system") + h.op_tuple(h.op_str("true"))
                                 + h.REDUCE + b"."),
    "newobj-ex-in-extra-state": (extra_state, h.storage_with_kwargs()),
    "cut-short": (metadata, P + h.op_tuple(h.op_int(1))[:-1]),
}
for name, (reader, data) in cases.items():
    try:
        reader(data)
        print(json.dumps([name, "loaded", ""]), flush=True)
    except cu.CheckpointRefused as exc:
        print(json.dumps([name, "refused", str(exc)]), flush=True)
    except cu.CheckpointDamagedPickle as exc:
        print(json.dumps([name, "damaged", str(exc)]), flush=True)
"""

MACHINE_EXPECTED = {
    "inst": ("refused", "the checkpoint metadata holds pickle opcode INST"),
    "obj": ("refused", "the common state holds pickle opcode OBJ"),
    "ext1": ("refused", "pickle opcode EXT1"),
    "text-persid": ("refused", "pickle opcode PERSID"),
    "persid-in-metadata": ("refused", "pickle opcode BINPERSID"),
    "newobj-ex": ("refused", "pickle opcode NEWOBJ_EX"),
    "reduce-a-dtype": ("refused", "REDUCE calling a dtype"),
    "append-into-a-dict": ("refused", "APPEND into a dict"),
    "setitem-into-a-namespace": ("refused", "SETITEM into a Namespace"),
    "build-a-dict": ("refused", "BUILD on a dict"),
    "namespace-dunder": ("refused", "BUILD on a argparse.Namespace setting '__class__'"),
    "dtype-flags": ("refused", "BUILD on numpy.dtype('<u4') with a state numpy never saves for it"),
    "size-of-an-array": ("refused", "numpy.dtype('O', False, True)"),
    "storage-called": ("refused", "REDUCE calling torch.FloatStorage"),
    "global-in-tensor": ("refused", "the tensor data holds argparse.Namespace"),
    "os-system-in-extra-state": ("refused", "the FP8 extra state holds os.system"),
    "newobj-ex-in-extra-state": ("refused", "the FP8 extra state holds pickle opcode NEWOBJ_EX"),
    "cut-short": ("damaged", "F: the checkpoint metadata cannot be read"),
}


def test_the_reader_refuses_each_misuse_of_an_opcode_by_name_and_survives():
    """One child runs every case; each line is one refusal (a case a regression let through would crash the child or
    print 'loaded')."""
    out = subprocess.run([sys.executable, "-c", MACHINE, str(ROOT / "tests")], capture_output=True, text=True,
                         timeout=300, preexec_fn=_no_core_dump)
    got = {name: (kind, said) for name, kind, said in map(json.loads, out.stdout.splitlines())}
    assert out.returncode == 0 and got.keys() == MACHINE_EXPECTED.keys(), (out.returncode, got, out.stderr[-2000:])
    for name, (kind, said) in MACHINE_EXPECTED.items():
        assert got[name][0] == kind and said in got[name][1] and "\n" not in got[name][1], (name, got[name])
        assert got[name][1].startswith("F: "), got[name]


def test_a_torchscript_archive_is_read_as_data_never_handed_to_torch_jit(tmp_path):
    """``torch.load(weights_only=False)`` hands a zip holding ``constants.pkl`` to ``torch.jit.load``; mtk's reader
    reads only ``data.pkl``, whose TorchScript classes it refuses by name."""
    import torch

    scripted = torch.jit.script(torch.nn.Linear(2, 2))
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    # torch.jit.save compresses its code: refused as no torch.save'd checkpoint is, before anything is inflated
    with pytest.raises(checkpoint_unpickle.CheckpointRefused, match=r"^F: the common state holds a compressed zip "
                                                                  r"member 'archive/code/"):
        checkpoint_unpickle.load_torch(buf.getvalue(), "F", "common state")
    stored = io.BytesIO()  # the same archive with every member stored: its pickle names TorchScript's classes
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    with pytest.raises(checkpoint_unpickle.CheckpointRefused, match=r"^F: the common state holds __torch__\."):
        checkpoint_unpickle.load_torch(stored.getvalue(), "F", "common state")


def test_a_torch_file_in_the_pre_zip_format_is_refused():
    import torch

    buf = io.BytesIO()
    torch.save({"iteration": 4}, buf, _use_new_zipfile_serialization=False)
    with pytest.raises(checkpoint_unpickle.CheckpointRefused, match="a torch file in the pre-zip format"):
        checkpoint_unpickle.load_torch(buf.getvalue(), "F", "common state")


def test_a_plain_pickle_of_a_tensor_reads_as_transformer_engine_writes_its_extra_state():
    """TE's ``_extra_state``: ``pickle.dumps`` of its state, tensors spelled through ``_load_from_bytes`` (a nested
    torch file in the pre-zip format). The reader builds the same tensors, with its own storage reader."""
    import pickle

    import torch

    state = {"scale_fwd": torch.arange(4, dtype=torch.float32), "amax": torch.ones(2, 3, dtype=torch.bfloat16)[:, 1]}
    data = pickle.dumps(state)
    checkpoint_unpickle.check_extra_state(torch.frombuffer(bytearray(data), dtype=torch.uint8), "F")
    got = checkpoint_unpickle.unpickler_class("F", "FP8 extra state")(io.BytesIO(data)).load()
    assert got.keys() == state.keys() and all(torch.equal(got[k], state[k]) for k in state)


# -- issue 49: shard paths stay inside the checkpoint dir -----------------------------------------------------------
def _outside(tmp_path: Path) -> Path:
    """A dir beside the checkpoint with a copy of its first shard: whatever reached it would read a valid file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    return outside


@pytest.mark.parametrize("how", ["dot-dot", "absolute", "link", "linked-dir"])
def test_a_shard_path_leaving_the_dir_is_refused_and_nothing_outside_is_touched(tmp_path, how):
    job, run_dir, iter_dir = _copy(tmp_path)
    outside = _outside(tmp_path)
    key = _key(iter_dir, "rng_state/shard_0.0_0.2")
    with open(iter_dir / ".metadata", "rb") as fh:
        meta = pickle.load(fh)  # the test's own fixture
    shard = next(iter_dir / info.relative_path for index, info in meta.storage_data.items() if index.fqn == key)
    shutil.copy(shard, outside / "shard.distcp")
    rel = {"dot-dot": "../outside/shard.distcp", "absolute": str(outside / "shard.distcp"),
           "link": "linked.distcp", "linked-dir": "sub/shard.distcp"}[how]
    if how == "link":
        (iter_dir / "linked.distcp").symlink_to(outside / "shard.distcp")
    if how == "linked-dir":
        (iter_dir / "sub").symlink_to(outside)
    hostile.point_shard(iter_dir, key, rel)
    for check in (lambda: check_resume_checkpoint(job, run_dir), lambda: ckpt_precheck.read_common_state(iter_dir)):
        with touched() as seen, pytest.raises(CheckpointDamaged) as err:
            check()
            if how in ("link", "linked-dir"):  # read_common_state opens only the common state's shard
                ckpt_precheck._check_shards(iter_dir)
        said = str(err.value)
        assert "\n" not in said and err.value.exit_code == 2 and rel in said, said
        assert ("leaves the checkpoint dir" in said) == (how in ("dot-dot", "absolute")), said
        assert ("symbolic link" in said) == (how in ("link", "linked-dir")), said
        assert inside(seen, outside) == [], inside(seen, outside)


def test_a_linked_iteration_dir_or_tracker_is_refused_and_not_followed(tmp_path):
    job, run_dir, iter_dir = _copy(tmp_path)
    outside = _outside(tmp_path)
    shutil.move(iter_dir, outside / iter_dir.name)
    iter_dir.symlink_to(outside / iter_dir.name)
    with touched() as seen, pytest.raises(CheckpointDamaged, match=f"^{iter_dir} is a symbolic link") as err:
        check_resume_checkpoint(job, run_dir)
    assert inside(seen, outside) == [] and err.value.exit_code == 2
    with pytest.raises(CheckpointDamaged, match=f"^{iter_dir} is a symbolic link"):
        ckpt_precheck.read_common_state(iter_dir)
    iter_dir.unlink()
    shutil.move(outside / iter_dir.name, iter_dir)
    tracker = iter_dir.parent / "latest_checkpointed_iteration.txt"
    (outside / "tracker").write_text("4\n")
    tracker.unlink()
    tracker.symlink_to(outside / "tracker")
    with touched() as seen, pytest.raises(CheckpointDamaged, match=f"^{tracker} is a symbolic link"):
        check_resume_checkpoint(job, run_dir)
    assert inside(seen, outside) == []
