"""The pickle format as the machine reads it: the bytes of each opcode's argument, and a handler for each opcode
real checkpoints use but seldom (the frequent ones, and every one that puts a value inside a container, run inline
in :meth:`~.machine.Machine.load`, which checks nesting as it goes).

None of these builds a container: each pushes a scalar the file spells out, or asks the rules (a global) or the
loader (a persistent id) for a value.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .base import Damaged, Refused

Resolver = Callable[[str, str], Any]  # (module, name) -> a value or a Callee; raises Refused when not admitted
Persistent = Callable[[Any], Any]  # a BINPERSID id -> the object (a storage); raises Refused/Damaged


class Reader:
    """The state of one load: the bytes, the stack, its marks, the memo."""

    def __init__(self, data: bytes | bytearray | memoryview, resolve: Resolver, persistent: Persistent | None,
                 start: int) -> None:
        self.data = bytes(data)
        self.pos = start
        self.resolve = resolve
        self.persistent = persistent
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}
        self.end = 0
        self.hollow = False  # a scan: tensors' storages are never read (the torch-file reader sets it)

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise Damaged(f"the pickle ends inside an opcode's argument (byte {self.pos})")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def _u8(self) -> int:
        return self._take(1)[0]

    def _u32(self) -> int:
        value: int = struct.unpack("<I", self._take(4))[0]
        return value

    def _pop(self) -> Any:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise Damaged("an opcode pops more than the pickle pushed")
        return self.stack.pop()

    def _top(self) -> Any:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise Damaged("an opcode needs a value the pickle never pushed")
        return self.stack[-1]

    # -- the opcodes run by a handler -------------------------------------------------------------------------
    def op_proto(self) -> None:
        if self._u8() > 5:
            raise Damaged("the pickle names a protocol above 5")

    def op_frame(self) -> None:
        self._take(8)  # a length hint for buffered readers; the machine holds the whole pickle anyway

    def op_newtrue(self) -> None:
        self.stack.append(True)

    def op_newfalse(self) -> None:
        self.stack.append(False)

    def op_long1(self) -> None:
        self.stack.append(int.from_bytes(self._take(self._u8()), "little", signed=True))

    def op_binfloat(self) -> None:
        self.stack.append(struct.unpack(">d", self._take(8))[0])

    def _text(self, n: int) -> None:
        try:
            self.stack.append(self._take(n).decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            raise Damaged("a string in the pickle is not UTF-8") from None

    def op_binunicode(self) -> None:
        self._text(self._u32())

    def op_binbytes(self) -> None:
        self.stack.append(self._take(self._u32()))

    def op_short_binbytes(self) -> None:
        self.stack.append(self._take(self._u8()))

    def op_binput(self) -> None:
        self.memo[self._u8()] = self._top()

    def op_long_binput(self) -> None:
        self.memo[self._u32()] = self._top()

    def _global_of(self, module: Any, name: Any) -> None:
        if type(module) is not str or type(name) is not str:
            raise Refused("STACK_GLOBAL naming a global by something other than two strings")
        self.stack.append(self.resolve(module, name))

    def op_global(self) -> None:
        def line() -> str:
            end = self.data.find(b"\n", self.pos)
            if end < 0:
                raise Damaged("a GLOBAL's name runs past the end of the pickle")
            text = self.data[self.pos:end]
            self.pos = end + 1
            try:
                return text.decode("utf-8")
            except UnicodeDecodeError:
                raise Damaged("a GLOBAL's name is not UTF-8") from None

        module = line()
        self._global_of(module, line())

    def op_stack_global(self) -> None:
        name = self._pop()
        self._global_of(self._pop(), name)

    def op_binpersid(self) -> None:
        pid = self._pop()
        if self.persistent is None:
            raise Refused("pickle opcode BINPERSID")
        self.stack.append(self.persistent(pid))


HANDLED: dict[str, Callable[[Reader], None]] = {
    "PROTO": Reader.op_proto, "FRAME": Reader.op_frame, "NEWTRUE": Reader.op_newtrue,
    "NEWFALSE": Reader.op_newfalse, "LONG1": Reader.op_long1, "BINFLOAT": Reader.op_binfloat,
    "BINUNICODE": Reader.op_binunicode, "BINBYTES": Reader.op_binbytes, "SHORT_BINBYTES": Reader.op_short_binbytes,
    "BINPUT": Reader.op_binput, "LONG_BINPUT": Reader.op_long_binput, "GLOBAL": Reader.op_global,
    "STACK_GLOBAL": Reader.op_stack_global, "BINPERSID": Reader.op_binpersid,
}


def codes() -> dict[str, int]:
    """Every opcode of the pickle format by name -> its byte."""
    import pickletools

    return {op.name: op.code.encode("latin-1")[0] for op in pickletools.opcodes}


def opcode_name(code: int) -> str:
    for name, byte in codes().items():
        if byte == code:
            return name
    return f"0x{code:02x} (no pickle opcode)"
