"""Read what ``torch.save`` writes, through the pickle machine, without ``torch.load``.

``torch.load(weights_only=False)`` with a restricted ``pickle_module`` is not one door: a zip holding
``constants.pkl`` is handed to ``torch.jit.load``, a file in the pre-zip format goes through its own legacy
path. Here a torch file is a zip (Python's ``zipfile``) whose ``<prefix>/data.pkl`` the machine runs; each
storage its persistent ids name is the record ``<prefix>/data/<key>``, whose size must be the one the id
declares, read into memory mtk owns. Nothing else in the zip is read.

torch writes every member stored, never compressed: a compressed member is refused before anything is inflated
(Python's ``zipfile`` would inflate a 1 KB bzip2 member to whatever it declares), and every member read must lie
inside the file, with the members read together no larger than the file (a zip may point many entries at the same
bytes). A member whose bytes fail their CRC is a damaged file, named as one.

The one pre-zip file mtk reads is the storage inside a plain pickle of a tensor (``torch.storage._load_from_bytes``
in a TransformerEngine module's FP8 extra state): five small pickles and the storage's bytes, each checked.
"""

from __future__ import annotations

import io
import zipfile
from typing import IO, Any, cast

from .base import Damaged, Refused, shown
from .machine import Machine
from .opcodes import Resolver
from .values import Storage, StorageKind, storage_kinds

ZIP_MAGIC = b"PK\x03\x04"
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization's MAGIC_NUMBER for the pre-zip format
LEGACY_PROTOCOL = 1001
UNREADABLE = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError)


def _typed(kind_dtype: Any, data: bytearray) -> Any:
    """A CPU TypedStorage over ``data`` (mtk's memory; not resizable, so no view can reach past it)."""
    import torch

    untyped = torch.frombuffer(data, dtype=torch.uint8).untyped_storage() if data else torch.UntypedStorage(0)
    return torch.storage.TypedStorage(wrap_storage=untyped, dtype=kind_dtype, _internal=True)


def _storage_id(pid: Any, length: int) -> tuple[StorageKind, str, int]:
    """(kind, key, numel) of a persistent id ``('storage', <storage type>, key, location, numel[, None])``."""
    ok = (type(pid) is tuple and len(pid) == length and type(pid[0]) is str and pid[0] == "storage"
          and isinstance(pid[1], StorageKind) and type(pid[2]) is str and type(pid[3]) is str
          and type(pid[4]) is int and pid[4] >= 0 and (length == 5 or pid[5] is None))
    if not ok:
        raise Refused("a persistent id other than a storage's")
    return pid[1], pid[2], pid[4]


class _Members:
    """The zip's members as torch writes them (stored, inside the file), each read at most once."""

    def __init__(self, archive: zipfile.ZipFile, size: int) -> None:
        self.archive, self.left = archive, size
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise Refused(f"a compressed zip member {shown(info.filename)} (torch.save never compresses)")
            if info.flag_bits & 0x1:
                raise Refused(f"an encrypted zip member {shown(info.filename)}")
            if info.file_size != info.compress_size or info.header_offset + info.file_size > size:
                raise Damaged(f"zip member {shown(info.filename)} declares {info.file_size} bytes beyond the file's "
                              f"{size}")

    def claim(self, info: zipfile.ZipInfo) -> int:
        """Count ``info``'s bytes against the file's: members that share bytes would read more than it holds."""
        self.left -= info.file_size
        if self.left < 0:
            raise Damaged("zip members that together hold more bytes than the file (entries sharing their bytes)")
        return info.file_size

    def read(self, name: str) -> bytes:
        info = self.archive.getinfo(name)
        self.claim(info)
        try:
            return self.archive.read(info)
        except UNREADABLE as exc:
            raise Damaged(f"zip member {shown(name)} cannot be read ({exc})") from None

    def read_into(self, info: zipfile.ZipInfo, data: bytearray) -> None:
        try:
            with self.archive.open(info) as fh:
                got = cast(io.BufferedIOBase, fh).readinto(data)
                if got == len(data):
                    fh.read(1)  # to the end: zipfile checks the member's CRC there
        except UNREADABLE as exc:
            raise Damaged(f"zip member {shown(info.filename)} cannot be read ({exc})") from None
        if got != len(data):
            raise Damaged(f"zip member {shown(info.filename)} is cut short")


def load(file: IO[bytes], resolve: Resolver, hollow: bool = False) -> Any:
    """The object a torch.save zip holds. ``hollow``: a scan, whose tensors are checked but never read."""
    head = file.read(4)
    if head != ZIP_MAGIC:
        raise Refused("a torch file in the pre-zip format (torch.save before 1.6; no checkpoint writes it)")
    size = file.seek(0, io.SEEK_END)
    file.seek(0)
    try:
        archive = zipfile.ZipFile(file)
    except UNREADABLE as exc:
        raise Damaged(f"not a readable torch file ({exc})") from None
    with archive:
        members = _Members(archive, size)
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise Damaged("not a torch file: no single <archive>/data.pkl in it")
        prefix = pickles[0][: -len("data.pkl")]
        order = f"{prefix}byteorder"
        if order in archive.namelist() and (archive.getinfo(order).file_size > 16 or members.read(order) != b"little"):
            raise Refused("a big-endian torch file")
        loaded: dict[str, Storage] = {}

        def persistent(pid: Any) -> Storage:
            kind, key, numel = _storage_id(pid, 5)
            if key in loaded:
                if (loaded[key].dtype, loaded[key].numel) != (kind.dtype, numel):
                    raise Damaged(f"storage {shown(key)} is named with two types or sizes")
                return loaded[key]
            try:
                info = archive.getinfo(f"{prefix}data/{key}")
            except KeyError:
                raise Damaged(f"the pickle names storage {shown(key)}, which the file does not hold") from None
            nbytes = numel * kind.dtype.itemsize
            if info.file_size != nbytes:
                raise Damaged(f"storage {shown(key)} holds {info.file_size} bytes, its id says {nbytes}")
            typed = None
            if not hollow:
                data = bytearray(members.claim(info))
                members.read_into(info, data)
                typed = _typed(kind.dtype, data)
            loaded[key] = Storage(kind.dtype, numel, typed)
            return loaded[key]

        machine = Machine(members.read(pickles[0]), resolve, persistent)
        machine.hollow = hollow
        return machine.load()


def _refuse_globals(module: str, name: str) -> Any:
    raise Refused(f"{module}.{name}")


def _storage_globals(module: str, name: str) -> Any:
    kind = storage_kinds().get((module, name))
    if kind is None:
        raise Refused(f"{module}.{name}")
    return kind


def read_legacy_storage(data: bytes, hollow: bool) -> Storage:
    """One storage in torch's pre-zip format, as ``UntypedStorage.__reduce__`` writes it: the magic number, the
    protocol, the byte order, the storage's persistent id, its key list, then its element count and bytes."""
    pos = 0

    def next_pickle(resolve: Any = _refuse_globals, persistent: Any = None) -> Any:
        nonlocal pos
        machine = Machine(data, resolve, persistent, start=pos)
        value = machine.load()
        pos = machine.end
        return value

    magic, protocol = next_pickle(), next_pickle()
    if type(magic) is not int or magic != LEGACY_MAGIC or type(protocol) is not int or protocol != LEGACY_PROTOCOL:
        raise Damaged("a nested torch file without torch's magic number")
    info = next_pickle()
    if type(info) is not dict or info.get("little_endian") is not True:
        raise Refused("a big-endian nested torch file")
    found: list[tuple[StorageKind, str, int]] = []

    def persistent(pid: Any) -> Storage:
        found.append(_storage_id(pid, 6))
        return Storage(found[-1][0].dtype, found[-1][2], None)

    root = next_pickle(_storage_globals, persistent)
    if not isinstance(root, Storage) or len(found) != 1:
        raise Refused("a nested torch file holding other than one storage")
    kind, key, numel = found[0]
    keys = next_pickle()
    if type(keys) is not list or len(keys) != 1 or keys[0] != key:
        raise Damaged("a nested torch file whose key list is not its storage's")
    nbytes = numel * kind.dtype.itemsize
    if int.from_bytes(data[pos:pos + 8], "little") != numel or len(data) != pos + 8 + nbytes:
        raise Damaged("a nested torch file whose storage bytes do not match its id")
    if hollow:
        return Storage(kind.dtype, numel, None)
    return Storage(kind.dtype, numel, _typed(kind.dtype, bytearray(data[pos + 8:])))
