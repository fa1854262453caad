"""The ranks read checkpoints through megatron-core, which unpickles the common state and every ShardedObject
with torch DCP's planner (``torch.load(weights_only=False)``): a planted object runs there. With the engine's
``compat.install()`` (every rank, ``mtk convert``) every read goes through mtk's reader (issues 43, 49): only the
globals and opcodes checkpoints hold, only files inside the checkpoint dir."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

from support import hostile_checkpoint as hostile
from support.hostile_checkpoint import plant, touching

ROOT = Path(__file__).resolve().parents[3]
PLAIN = ROOT / "tests" / "fixtures" / "megatron_lm" / "plain_tp2" / "checkpoints" / "iter_0000004"

LOAD = """
import sys
from mtk.training import compat
compat.{setup}()
from megatron.core import dist_checkpointing
common = dist_checkpointing.load_common_state_dict(sys.argv[1])
print("loaded iteration", common["iteration"])
"""


def _load(iter_dir: Path, setup: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD.format(setup=setup), str(iter_dir)], capture_output=True,
                          text=True, timeout=600, cwd=iter_dir.parent)


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    iter_dir = tmp_path / "iter_0000004"
    shutil.copytree(PLAIN, iter_dir)
    marker = tmp_path / "ran"
    plant(iter_dir, "common_state/shard_0_1", [{"iteration": 4, "args": touching(marker)}])
    return iter_dir, marker


def test_megatron_core_alone_runs_a_planted_common_state(tmp_path):
    """Why the guard exists: without it the payload runs inside megatron-core's own reader."""
    iter_dir, marker = _planted(tmp_path)
    out = _load(iter_dir, "install_import_stubs")
    assert out.returncode == 0 and marker.exists(), out.stderr[-3000:]


def test_with_the_engines_setup_the_ranks_refuse_it_and_run_nothing(tmp_path):
    iter_dir, marker = _planted(tmp_path)
    out = _load(iter_dir, "install")
    assert out.returncode != 0 and not marker.exists(), out.stdout + out.stderr[-3000:]
    assert f"{iter_dir}: the common state holds posix.system, which a checkpoint never holds" in out.stderr


def test_with_the_engines_setup_megatron_lms_checkpoint_still_loads(tmp_path):
    out = _load(PLAIN, "install")
    assert out.returncode == 0 and "loaded iteration 4" in out.stdout, out.stderr[-3000:]


# megatron-core registers these for its own weights_only loads; mtk's reader leaves them out: their state reaches
# native code (a generator's state, a buffer, a dtype class), or no checkpoint holds them
LEFT_OUT = {"torch._C.Generator", "_io.BytesIO", "numpy.dtypes.UInt32DType", "types.SimpleNamespace",
            "megatron.core.optimizer.optimizer_config.OptimizerConfig"}


def test_megatron_cores_safe_globals_are_admitted_but_those_left_out():
    """A checkpoint may hold each of megatron-core's safe globals but LEFT_OUT; a new one in a megatron-core upgrade
    shows here and needs a decision."""
    from mtk.training import compat

    compat.install_import_stubs()
    from megatron.core.safe_globals import SAFE_GLOBALS

    from mtk import checkpoint_unpickle

    names = {f"{obj.__module__}.{obj.__qualname__}": obj for obj in SAFE_GLOBALS}
    assert names.keys() >= LEFT_OUT, LEFT_OUT - names.keys()
    objects = checkpoint_unpickle.CHECKPOINT_GLOBALS
    for dotted, obj in names.items():
        admitted = checkpoint_unpickle.admitted(obj.__module__, obj.__qualname__, objects)
        assert admitted == (dotted not in LEFT_OUT), dotted


# One child: megatron-core's own readers on a rank (the engine's compat.install, as every rank and `mtk convert` run
# it), each crafted checkpoint dir in turn; one JSON line per case. A payload that ran would crash the child.
RANK = r"""
import io, json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
from mtk.training import compat
compat.install()
import torch
from megatron.core import dist_checkpointing
from torch.distributed.checkpoint import FileSystemReader
from mtk.exitcodes import UserFacingError

def common(path):
    return dist_checkpointing.load_common_state_dict(path)["iteration"]

def one_object(path, key):
    sd = {key: io.BytesIO()}
    torch.distributed.checkpoint.load(sd, storage_reader=FileSystemReader(path), no_dist=True)
    return type(sd[key]).__name__

def one_tensor(path, key):
    meta = FileSystemReader(path).read_metadata().state_dict_metadata[key]
    sd = {key: torch.empty(meta.size, dtype=meta.properties.dtype)}
    torch.distributed.checkpoint.load(sd, storage_reader=FileSystemReader(path), no_dist=True)
    return float(sd[key].float().abs().sum())

def safe_unpickler(path):
    from megatron.core.safe_globals import SafeUnpickler
    return SafeUnpickler(open(path, "rb")).load()

for line in sys.stdin:
    name, reader, *args = json.loads(line)
    try:
        got = globals()[reader](*args)
        print(json.dumps([name, "loaded", repr(got)]), flush=True)
    except UserFacingError as exc:
        print(json.dumps([name, "refused", str(exc)]), flush=True)
    except Exception as exc:
        print(json.dumps([name, "failed", f"{type(exc).__name__}: {exc}"]), flush=True)
"""


def _key(iter_dir: Path, prefix: str) -> str:
    with open(iter_dir / ".metadata", "rb") as fh:
        keys = pickle.load(fh).state_dict_metadata  # the test's own fixture
    return prefix if prefix in keys else sorted(k for k in keys if k.startswith(prefix))[0]


def _case(tmp_path: Path, name: str) -> Path:
    iter_dir = tmp_path / name / "iter_0000004"
    shutil.copytree(PLAIN, iter_dir)
    return iter_dir


def test_megatron_cores_reads_on_a_rank_refuse_each_attack_in_one_line_and_survive(tmp_path):
    """Issue 49 through a rank: the opcode attacks, an object outside the dir, a linked shard, a planted tensor item,
    a legacy common.pt, a module's FP8 extra state, megatron-core's own FP8 unpickler — and the real checkpoint still
    loads, objects and tensors."""
    cases: list[tuple[str, str, list[str], str]] = []  # name, reader, args, what the refusal says
    d = _case(tmp_path, "storage-kwargs")
    hostile.plant_bytes(d, "common_state/shard_0_1", hostile.torch_file(hostile.storage_with_kwargs()))
    cases.append(("storage-kwargs", "common", [str(d)], f"{d}: the common state holds pickle opcode NEWOBJ_EX"))
    d = _case(tmp_path, "object-array")
    hostile.plant_bytes(d, "common_state/shard_0_1", hostile.torch_file(hostile.object_array_from_bytes()))
    cases.append(("object-array", "common", [str(d)], f"{d}: the common state holds numpy.dtype('O', False, True)"))
    d = _case(tmp_path, "object-array-rng")
    rng = _key(d, "rng_state/")
    shard = hostile.plant_bytes(d, rng, hostile.torch_file(hostile.object_array_from_bytes()))
    cases.append(("object-array-rng", "one_object", [str(d), rng],
                  f"{shard}: the rng_state holds numpy.dtype('O', False, True)"))
    d = _case(tmp_path, "class-build")
    chosen = tmp_path / "chosen-by-the-file"
    (d / ".metadata").write_bytes(hostile.class_attribute_set("pathlib", "PosixPath", "_str", str(chosen)))
    cases.append(("class-build", "common", [str(d)],
                  f"{d / '.metadata'}: the checkpoint metadata holds BUILD on pathlib.PosixPath itself"))
    d = _case(tmp_path, "legacy-common-pt")
    (d / "common.pt").write_bytes(hostile.torch_file(hostile.storage_with_kwargs()))
    cases.append(("legacy-common-pt", "common", [str(d)], f"{d / 'common.pt'}: the common state holds pickle opcode"))
    d = _case(tmp_path, "tensor-item")
    tensor = _key(d, "embedding.word_embeddings.weight")
    shard = hostile.plant_bytes(d, tensor, hostile.torch_bytes(touching(tmp_path / "ran")))
    cases.append(("tensor-item", "one_tensor", [str(d), tensor], f"{shard}: the tensor data holds posix.system"))
    d = _case(tmp_path, "extra-state")
    extra = _key(d, "decoder.layers.self_attention.linear_proj._extra_state")
    inner = torch_frombuffer(pickle.dumps(touching(tmp_path / "ran")))
    shard = hostile.plant_bytes(d, extra, hostile.torch_bytes(inner))
    cases.append(("extra-state", "one_object", [str(d), extra], f"{shard}: the FP8 extra state holds posix.system"))
    d = _case(tmp_path, "dot-dot")
    hostile.point_shard(d, "common_state/shard_0_1", "../../outside.distcp")
    cases.append(("dot-dot", "common", [str(d)], "shard path '../../outside.distcp' leaves the checkpoint dir"))
    d = _case(tmp_path, "linked-shard")
    (tmp_path / "outside.distcp").write_bytes((d / "__0_0.distcp").read_bytes())
    (d / "__0_0.distcp").unlink()
    (d / "__0_0.distcp").symlink_to(tmp_path / "outside.distcp")
    cases.append(("linked-shard", "common", [str(d)], "shard path '__0_0.distcp' in"))
    (tmp_path / "fp8.pkl").write_bytes(hostile.storage_with_kwargs())
    cases.append(("safe-unpickler", "safe_unpickler", [str(tmp_path / "fp8.pkl")],
                  "the FP8 extra state holds pickle opcode NEWOBJ_EX"))
    real = [("real-common", "common", [str(PLAIN)], "4"),
            ("real-rng", "one_object", [str(PLAIN), _key(PLAIN, "rng_state/")], "list"),
            ("real-tensor", "one_tensor", [str(PLAIN), _key(PLAIN, "embedding.word_embeddings.weight")], "")]
    stdin = "".join(json.dumps([name, reader, *args]) + "\n" for name, reader, args, _ in cases + real)
    out = subprocess.run([sys.executable, "-c", RANK, str(ROOT / "tests")], input=stdin, capture_output=True,
                         text=True, timeout=900, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    got = {name: (kind, said) for name, kind, said in map(json.loads, out.stdout.splitlines())}
    assert out.returncode == 0 and len(got) == len(cases) + len(real), (out.returncode, got, out.stderr[-3000:])
    for name, _, _, said in cases:
        assert got[name][0] == "refused" and said in got[name][1] and "\n" not in got[name][1], (name, got[name])
    assert got["real-common"] == ("loaded", "4") and got["real-rng"] == ("loaded", "'list'"), got
    assert got["real-tensor"][0] == "loaded" and float(got["real-tensor"][1]) > 0, got
    assert not (tmp_path / "ran").exists() and not chosen.exists()


def torch_frombuffer(data: bytes):
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()
