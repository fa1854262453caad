"""A hostile checkpoint, as someone with write access to a shared checkpoint dir would make one: a real
checkpoint with one pickled object swapped for one that reduces to ``os.system``, and a census of the globals
a checkpoint's pickles name (``pickletools``, nothing unpickled)."""

from __future__ import annotations

import io
import os
import pickle
import pickletools
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


def census(iter_dir: Path) -> dict[str, set[tuple[str, str]]]:
    """{"metadata": globals of .metadata, "objects": globals of every pickled object (common state, rng_state,
    ...)} of one torch_dist checkpoint dir."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    raw_meta = (iter_dir / ".metadata").read_bytes()
    meta = pickle.loads(raw_meta)  # the suite's own checkpoints
    objects: set[tuple[str, str]] = set()
    for index, info in meta.storage_data.items():
        if isinstance(meta.state_dict_metadata[index.fqn], BytesStorageMetadata):
            with open(iter_dir / info.relative_path, "rb") as fh:
                fh.seek(info.offset)
                objects |= globals_of(_pickle_of(fh.read(info.length)))
    if (iter_dir / "common.pt").is_file():
        objects |= globals_of(_pickle_of((iter_dir / "common.pt").read_bytes()))
    return {"metadata": globals_of(raw_meta), "objects": objects}
