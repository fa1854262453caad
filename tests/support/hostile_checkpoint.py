"""A hostile checkpoint, as someone with write access to a shared checkpoint dir would make one: a real
checkpoint with one pickled object swapped for one that reduces to ``os.system``, and a census of the globals
a checkpoint's pickles name (``pickletools``, nothing unpickled)."""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import struct
import zipfile
from pathlib import Path

STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}


class Payload:
    """Reduces to ``os.system(command)``: unpickling it runs the command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def touching(marker: Path) -> Payload:
    return Payload(f"touch {marker}")


def torch_bytes(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def plant(iter_dir: Path, key: str, obj) -> Path:
    """Swap the object stored under ``key`` for ``obj``: appended to its shard, ``.metadata`` pointed at it (written
    with plain pickle, as torch writes it). Returns the shard."""
    with open(iter_dir / ".metadata", "rb") as fh:
        meta = pickle.load(fh)  # the test's own fixture, copied from the suite's checkpoints
    index = next(i for i in meta.storage_data if i.fqn == key)
    info = meta.storage_data[index]
    data = torch_bytes(obj)
    shard = iter_dir / info.relative_path
    offset = shard.stat().st_size
    with open(shard, "ab") as fh:
        fh.write(data)
    info.offset, info.length = offset, len(data)
    with open(iter_dir / ".metadata", "wb") as fh:
        pickle.dump(meta, fh)
    return shard


def globals_of(data: bytes) -> set[tuple[str, str]]:
    """Every (module, name) a pickle names (GLOBAL, INST, STACK_GLOBAL over literal or memoised strings)."""
    found: set[tuple[str, str]] = set()
    stack: list[str | None] = []
    memo: dict[int, str | None] = {}
    for op, arg, _ in pickletools.genops(data):
        if op.name in STRINGS:
            stack.append(arg)
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            stack.append(memo.get(arg))
        elif op.name == "MEMOIZE":
            memo[len(memo)] = stack[-1] if stack else None
        elif op.name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = stack[-1] if stack else None
        elif op.name in ("GLOBAL", "INST"):
            module, name = arg.split(" ", 1)
            found.add((module, name))
            stack.append(None)
        elif op.name == "STACK_GLOBAL":
            module, name = stack[-2], stack[-1]
            assert module is not None and name is not None, "a global named by a computed string"
            found.add((module, name))
            stack.append(None)
        else:
            stack.append(None)
    return found


def _pickle_of(raw: bytes) -> bytes:
    if raw[:2] != b"PK":
        return raw
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))


def opcodes_of(data: bytes) -> set[str]:
    """Every opcode a pickle uses (pickletools, nothing unpickled)."""
    return {op.name for op, _, _ in pickletools.genops(data)}


def census(iter_dir: Path) -> dict[str, set]:
    """What one torch_dist checkpoint dir's pickles hold, nothing unpickled: the globals ("metadata", "objects":
    every pickled object — common state, rng_state, ... —, "tensors": every tensor item) and the opcodes
    ("metadata_ops", "objects_ops", "tensors_ops")."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    raw_meta = (iter_dir / ".metadata").read_bytes()
    meta = pickle.loads(raw_meta)  # the suite's own checkpoints
    found: dict[str, set] = {"metadata": globals_of(raw_meta), "metadata_ops": opcodes_of(raw_meta), "objects": set(),
                             "objects_ops": set(), "tensors": set(), "tensors_ops": set()}
    for index, info in meta.storage_data.items():
        kind = "objects" if isinstance(meta.state_dict_metadata[index.fqn], BytesStorageMetadata) else "tensors"
        with open(iter_dir / info.relative_path, "rb") as fh:
            fh.seek(info.offset)
            data = _pickle_of(fh.read(info.length))
        found[kind] |= globals_of(data)
        found[f"{kind}_ops"] |= opcodes_of(data)
    if (iter_dir / "common.pt").is_file():
        data = _pickle_of((iter_dir / "common.pt").read_bytes())
        found["objects"] |= globals_of(data)
        found["objects_ops"] |= opcodes_of(data)
    return found


def assert_admitted(found: dict[str, set]) -> None:
    """Every global and opcode of a census is one mtk's reader admits for its kind of file."""
    from mtk import checkpoint_unpickle as cu

    for kind, table in (("metadata", cu.METADATA_GLOBALS), ("objects", cu.CHECKPOINT_GLOBALS),
                        ("tensors", cu.TENSOR_GLOBALS)):
        for module, name in found[kind]:
            assert cu.admitted(module, name, table), (kind, module, name)
        assert found[f"{kind}_ops"] <= cu.ADMITTED_OPCODES, (kind, found[f"{kind}_ops"] - cu.ADMITTED_OPCODES)


# -- pickles pickle's own Pickler would never write: the opcodes themselves are the attack (issue 49) -------------
# Each helper spells one opcode of the pickle format (pickletools documents them); a payload is their concatenation.
PROTO4, STOP, MARK, TUPLE, EMPTY_DICT, SETITEMS = b"\x80\x04", b".", b"(", b"t", b"}", b"u"
NEWOBJ_EX, REDUCE, BUILD, NONE, NEWFALSE, NEWTRUE = b"\x92", b"R", b"b", b"N", b"\x89", b"\x88"


def op_global(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def op_str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def op_int(value: int) -> bytes:
    raw = value.to_bytes(9, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw  # LONG1: any int, an address included


def op_bytes(raw: bytes) -> bytes:
    return b"B" + struct.pack("<I", len(raw)) + raw


def op_tuple(*items: bytes) -> bytes:
    return MARK + b"".join(items) + TUPLE


def op_dict(**items: bytes) -> bytes:
    return EMPTY_DICT + MARK + b"".join(op_str(k) + v for k, v in items.items()) + SETITEMS


ADDRESS = 0x4141414141410000  # where a file would point the process: unmapped, so the victim dies at once


def storage_with_kwargs() -> bytes:
    """``torch.UntypedStorage(8, allocator=ADDRESS)`` by NEWOBJ_EX: torch takes the int for a C++ allocator and calls
    its virtual ``allocate()`` (issue 49, 1). ``torch.UntypedStorage`` is an admitted storage class."""
    return (PROTO4 + op_global("torch", "UntypedStorage") + op_tuple(op_int(8)) + op_dict(allocator=op_int(ADDRESS))
            + NEWOBJ_EX + STOP)


def object_array_from_bytes() -> bytes:
    """An object dtype restored with its flags cleared (numpy then takes an array's raw bytes for it), an array of
    that dtype from 8 bytes of the file, iterated by ``torch.Size``: numpy reads ADDRESS as a ``PyObject*``
    (issue 49, 2). Every global in it was admitted by name."""
    dtype = (op_global("numpy", "dtype") + op_tuple(op_str("O"), NEWFALSE, NEWTRUE) + REDUCE
             + op_tuple(op_int(3), op_str("|"), NONE, NONE, NONE, op_int(-1), op_int(-1), op_int(0)) + BUILD)
    array = (op_global("numpy._core.multiarray", "_reconstruct")
             + op_tuple(op_global("numpy", "ndarray"), op_tuple(op_int(0)), op_bytes(b"b")) + REDUCE
             + op_tuple(op_int(1), op_tuple(op_int(1)), dtype, NEWFALSE, op_bytes(ADDRESS.to_bytes(8, "little")))
             + BUILD)
    return PROTO4 + op_global("torch", "Size") + op_tuple(array) + REDUCE + STOP


def class_attribute_set(module: str, name: str, attribute: str, value: str) -> bytes:
    """BUILD on the admitted class itself with the state ``(None, {attribute: value})``: pickle's BUILD runs
    ``setattr(cls, attribute, value)`` — ``pathlib.PosixPath._str`` makes every Path in the process that string
    (issue 49, 3)."""
    return (PROTO4 + op_global(module, name) + op_tuple(NONE, op_dict(**{attribute: op_str(value)})) + BUILD
            + STOP)


def torch_file(pickle_bytes: bytes) -> bytes:
    """A torch.save zip whose ``data.pkl`` is ``pickle_bytes`` (torch's own reader takes it as any other)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/byteorder", b"little")
        z.writestr("archive/version", b"3\n")
    return out.getvalue()


def plant_bytes(iter_dir: Path, key: str, data: bytes) -> Path:
    """Like :func:`plant`, with the object's stored bytes given as they are (a crafted torch file)."""
    with open(iter_dir / ".metadata", "rb") as fh:
        meta = pickle.load(fh)  # the test's own fixture
    index = next(i for i in meta.storage_data if i.fqn == key)
    info = meta.storage_data[index]
    shard = iter_dir / info.relative_path
    offset = shard.stat().st_size
    with open(shard, "ab") as fh:
        fh.write(data)
    info.offset, info.length = offset, len(data)
    with open(iter_dir / ".metadata", "wb") as fh:
        pickle.dump(meta, fh)
    return shard


def point_shard(iter_dir: Path, key: str, relative_path: str) -> None:
    """Point the object stored under ``key`` at ``relative_path`` (in ``.metadata``, as torch writes it)."""
    with open(iter_dir / ".metadata", "rb") as fh:
        meta = pickle.load(fh)  # the test's own fixture
    index = next(i for i in meta.storage_data if i.fqn == key)
    meta.storage_data[index].relative_path = relative_path
    with open(iter_dir / ".metadata", "wb") as fh:
        pickle.dump(meta, fh)
