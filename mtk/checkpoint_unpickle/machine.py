"""The pickle machine: runs a pickle's opcodes one by one in Python, so that each opcode, not only each global, is a
decision of mtk's.

``pickle.Unpickler`` lets a file choose what runs: ``find_class`` filters the globals, but NEWOBJ_EX then calls an
admitted class with keyword arguments the file chooses, BUILD calls ``setattr`` on whatever is on the stack (a class
too), and every admitted callable receives arguments nobody checked. Here:

- only the opcodes real checkpoints use are run (:data:`OPCODES`); any other is refused by name before it runs;
- a global is never imported by the name the file gives: GLOBAL/STACK_GLOBAL look the pair up in the rules
  (:mod:`.rules`) and push what the rule gives: a value (a dtype) or a :class:`Callee` that checks its arguments;
- REDUCE and NEWOBJ call only a Callee, with positional arguments (kwargs have no opcode here);
- BUILD applies a state only to an object a Callee made in this load and marked buildable, through that Callee's
  own rule; never to a class, a value or a container;
- APPEND(S) only into lists, SETITEM(S) only into dicts, BINPERSID only through the loader's storage rule.

A refusal raises :class:`Refused` naming the opcode or the global; a file that is cut short or inconsistent raises
:class:`Damaged`. Neither runs anything of the file.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import Any


class Refused(Exception):
    """The pickle holds something no checkpoint holds; ``thing`` names it (an opcode, a global, a misuse)."""

    def __init__(self, thing: str) -> None:
        super().__init__(thing)
        self.thing = thing


class Damaged(Exception):
    """The pickle is cut short or inconsistent (a damaged file, not a hostile one)."""


class Callee:
    """An admitted callable as the machine sees it: it checks its arguments and builds the object itself.

    ``name`` is the global's dotted name (for messages). A subclass overrides ``reduce``/``newobj``/``build``; the
    defaults refuse, so a rule admits exactly the uses it spells out."""

    name = "?"

    def reduce(self, args: tuple, machine: Machine) -> Any:
        raise Refused(f"REDUCE calling {self.name}")

    def newobj(self, args: tuple, machine: Machine) -> Any:
        raise Refused(f"NEWOBJ of {self.name}")

    def build(self, obj: Any, state: Any, machine: Machine) -> None:
        raise Refused(f"BUILD on a {self.name}")


Resolver = Callable[[str, str], Any]  # (module, name) -> a value or a Callee; raises Refused when not admitted
Persistent = Callable[[Any], Any]  # a BINPERSID id -> the object (a storage); raises Refused/Damaged

_MARK = object()


class Machine:
    """One load of one pickle. ``resolve`` turns GLOBAL into a value or Callee; ``persistent`` serves BINPERSID
    (None: the file kind holds none)."""

    def __init__(self, data: bytes | bytearray | memoryview, resolve: Resolver,
                 persistent: Persistent | None = None, start: int = 0) -> None:
        self.data = bytes(data)
        self.pos = start
        self.resolve = resolve
        self.persistent = persistent
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}
        self._buildable: dict[int, tuple[Any, Callee]] = {}  # id -> (the object, kept alive; its rule)
        self.end = 0
        self.hollow = False  # a scan: tensors' storages are never read (the torch-file reader sets it)

    # -- helpers for rules ------------------------------------------------------------------------------------
    def made(self, obj: Any, rule: Callee) -> Any:
        """Mark ``obj`` (made by ``rule`` in this load) as one BUILD may apply a state to, through ``rule``."""
        self._buildable[id(obj)] = (obj, rule)
        return obj

    # -- reading ----------------------------------------------------------------------------------------------
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

    def _pop_mark(self) -> list[Any]:
        if not self.marks:
            raise Damaged("an opcode needs a MARK the pickle never set")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def _pop(self) -> Any:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise Damaged("an opcode pops more than the pickle pushed")
        return self.stack.pop()

    def _top(self) -> Any:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise Damaged("an opcode needs a value the pickle never pushed")
        return self.stack[-1]

    # -- running ----------------------------------------------------------------------------------------------
    def load(self) -> Any:
        """Run the pickle to its STOP; return the object. ``self.end``: the offset just past STOP.

        The most frequent opcodes of a DCP ``.metadata`` (memo reads and writes, small ints, marks, empty
        containers) are run inline, the rest by their handler: a large model's metadata is tens of MB."""
        ops, data, stack, memo, marks = OPCODES, self.data, self.stack, self.memo, self.marks
        size = len(data)
        pos = self.pos
        while True:
            if pos >= size:
                raise Damaged("the pickle ends before its STOP")
            code = data[pos]
            pos += 1
            if code == 0x94:  # MEMOIZE
                if len(stack) <= (marks[-1] if marks else 0):
                    raise Damaged("MEMOIZE with nothing to memoize")
                memo[len(memo)] = stack[-1]
            elif code == 0x6A or code == 0x68:  # LONG_BINGET, BINGET
                if code == 0x6A:
                    if pos + 4 > size:
                        raise Damaged("the pickle ends inside an opcode's argument")
                    index = int.from_bytes(data[pos:pos + 4], "little")
                    pos += 4
                else:
                    if pos >= size:
                        raise Damaged("the pickle ends inside an opcode's argument")
                    index = data[pos]
                    pos += 1
                try:
                    stack.append(memo[index])
                except KeyError:
                    raise Damaged(f"the pickle reads memo slot {index} it never wrote") from None
            elif code == 0x4B:  # BININT1
                if pos >= size:
                    raise Damaged("the pickle ends inside an opcode's argument")
                stack.append(data[pos])
                pos += 1
            elif code == 0x28:  # MARK
                marks.append(len(stack))
            elif code == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif code == 0x7D:  # EMPTY_DICT
                stack.append({})
            elif code == 0x4E:  # NONE
                stack.append(None)
            else:
                handler = ops.get(code)
                if handler is None:
                    raise Refused(f"pickle opcode {_opcode_name(code)}")
                if handler is _stop:
                    if len(stack) != 1 or marks:
                        raise Damaged("the pickle stops with a stack that is not one object")
                    self.pos = self.end = pos
                    return stack.pop()
                self.pos = pos
                handler(self)
                pos = self.pos


def _opcode_name(code: int) -> str:
    import pickletools

    for op in pickletools.opcodes:
        if op.code.encode("latin-1")[0] == code:
            return op.name
    return f"0x{code:02x} (no pickle opcode)"


# -- opcode handlers: each is one opcode of the pickle format, restricted as the module docstring says ---------------
def _proto(m: Machine) -> None:
    if m._u8() > 5:
        raise Damaged("the pickle names a protocol above 5")


def _frame(m: Machine) -> None:
    m._take(8)  # a length hint for buffered readers; the machine reads the whole pickle anyway


def _stop(m: Machine) -> None:  # handled in Machine.load
    raise AssertionError


def _mark(m: Machine) -> None:
    m.marks.append(len(m.stack))


def _none(m: Machine) -> None:
    m.stack.append(None)


def _newtrue(m: Machine) -> None:
    m.stack.append(True)


def _newfalse(m: Machine) -> None:
    m.stack.append(False)


def _binint(m: Machine) -> None:
    m.stack.append(struct.unpack("<i", m._take(4))[0])


def _binint1(m: Machine) -> None:
    m.stack.append(m._u8())


def _binint2(m: Machine) -> None:
    m.stack.append(struct.unpack("<H", m._take(2))[0])


def _long1(m: Machine) -> None:
    m.stack.append(int.from_bytes(m._take(m._u8()), "little", signed=True))


def _binfloat(m: Machine) -> None:
    m.stack.append(struct.unpack(">d", m._take(8))[0])


def _text(m: Machine, n: int) -> None:
    try:
        m.stack.append(m._take(n).decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        raise Damaged("a string in the pickle is not UTF-8") from None


def _binunicode(m: Machine) -> None:
    _text(m, m._u32())


def _short_binunicode(m: Machine) -> None:
    _text(m, m._u8())


def _binbytes(m: Machine) -> None:
    m.stack.append(m._take(m._u32()))


def _short_binbytes(m: Machine) -> None:
    m.stack.append(m._take(m._u8()))


def _empty_tuple(m: Machine) -> None:
    m.stack.append(())


def _tuple(m: Machine) -> None:
    m.stack.append(tuple(m._pop_mark()))


def _tuple1(m: Machine) -> None:
    m.stack.append((m._pop(),))


def _tuple2(m: Machine) -> None:
    b = m._pop()
    m.stack.append((m._pop(), b))


def _tuple3(m: Machine) -> None:
    c = m._pop()
    b = m._pop()
    m.stack.append((m._pop(), b, c))


def _empty_list(m: Machine) -> None:
    m.stack.append([])


def _list_target(m: Machine, op: str) -> list:
    target = m._top()
    if type(target) is not list:
        raise Refused(f"{op} into a {type(target).__name__} (only into a list)")
    return target


def _append(m: Machine) -> None:
    item = m._pop()
    _list_target(m, "APPEND").append(item)


def _appends(m: Machine) -> None:
    items = m._pop_mark()
    _list_target(m, "APPENDS").extend(items)


def _empty_dict(m: Machine) -> None:
    m.stack.append({})


def _dict_target(m: Machine, op: str) -> dict:
    target = m._top()
    if type(target) not in (dict, OrderedDict):
        raise Refused(f"{op} into a {type(target).__name__} (only into a dict)")
    return target


def _setitem(m: Machine) -> None:
    value = m._pop()
    key = m._pop()
    _setitems_into(_dict_target(m, "SETITEM"), [key, value])


def _setitems(m: Machine) -> None:
    items = m._pop_mark()
    if len(items) % 2:
        raise Damaged("SETITEMS with an odd number of items")
    _setitems_into(_dict_target(m, "SETITEMS"), items)


def _setitems_into(target: dict, items: list[Any]) -> None:
    for i in range(0, len(items), 2):
        try:
            target[items[i]] = items[i + 1]
        except TypeError:
            raise Damaged(f"a dict key of type {type(items[i]).__name__} cannot be hashed") from None


def _memo_get(m: Machine, index: int) -> None:
    try:
        m.stack.append(m.memo[index])
    except KeyError:
        raise Damaged(f"the pickle reads memo slot {index} it never wrote") from None


def _binget(m: Machine) -> None:
    _memo_get(m, m._u8())


def _long_binget(m: Machine) -> None:
    _memo_get(m, m._u32())


def _binput(m: Machine) -> None:
    m.memo[m._u8()] = m._top()


def _long_binput(m: Machine) -> None:
    m.memo[m._u32()] = m._top()


def _memoize(m: Machine) -> None:
    m.memo[len(m.memo)] = m._top()


def _global_of(m: Machine, module: Any, name: Any) -> None:
    if type(module) is not str or type(name) is not str:
        raise Refused("STACK_GLOBAL naming a global by something other than two strings")
    m.stack.append(m.resolve(module, name))


def _global(m: Machine) -> None:
    def line() -> str:
        end = m.data.find(b"\n", m.pos)
        if end < 0:
            raise Damaged("a GLOBAL's name runs past the end of the pickle")
        text = m.data[m.pos:end]
        m.pos = end + 1
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError:
            raise Damaged("a GLOBAL's name is not UTF-8") from None

    module = line()
    _global_of(m, module, line())


def _stack_global(m: Machine) -> None:
    name = m._pop()
    _global_of(m, m._pop(), name)


def _callee(m: Machine, op: str) -> tuple[Callee, tuple]:
    args = m._pop()
    target = m._pop()
    if not isinstance(target, Callee):
        raise Refused(f"{op} calling a {type(target).__name__} (only an admitted class or function)")
    if type(args) is not tuple:
        raise Refused(f"{op} of {target.name} with arguments that are not a tuple")
    return target, args


def _reduce(m: Machine) -> None:
    target, args = _callee(m, "REDUCE")
    m.stack.append(target.reduce(args, m))


def _newobj(m: Machine) -> None:
    target, args = _callee(m, "NEWOBJ")
    m.stack.append(target.newobj(args, m))


def _build(m: Machine) -> None:
    state = m._pop()
    obj = m._top()
    entry = m._buildable.get(id(obj))
    if entry is None or entry[0] is not obj:
        what = (f"the class {getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')} itself"
                if isinstance(obj, type) else
                f"{obj.name} itself" if isinstance(obj, Callee) else f"a {type(obj).__name__}")
        raise Refused(f"BUILD on {what} (a state only goes into an object this load made)")
    entry[1].build(obj, state, m)


def _binpersid(m: Machine) -> None:
    pid = m._pop()
    if m.persistent is None:
        raise Refused("pickle opcode BINPERSID")
    m.stack.append(m.persistent(pid))


_HANDLERS: dict[str, Callable[[Machine], None]] = {
    "PROTO": _proto, "FRAME": _frame, "STOP": _stop, "MARK": _mark,
    "NONE": _none, "NEWTRUE": _newtrue, "NEWFALSE": _newfalse,
    "BININT": _binint, "BININT1": _binint1, "BININT2": _binint2, "LONG1": _long1, "BINFLOAT": _binfloat,
    "BINUNICODE": _binunicode, "SHORT_BINUNICODE": _short_binunicode,
    "BINBYTES": _binbytes, "SHORT_BINBYTES": _short_binbytes,
    "EMPTY_TUPLE": _empty_tuple, "TUPLE": _tuple, "TUPLE1": _tuple1, "TUPLE2": _tuple2, "TUPLE3": _tuple3,
    "EMPTY_LIST": _empty_list, "APPEND": _append, "APPENDS": _appends,
    "EMPTY_DICT": _empty_dict, "SETITEM": _setitem, "SETITEMS": _setitems,
    "BINGET": _binget, "LONG_BINGET": _long_binget, "BINPUT": _binput, "LONG_BINPUT": _long_binput,
    "MEMOIZE": _memoize,
    "GLOBAL": _global, "STACK_GLOBAL": _stack_global, "REDUCE": _reduce, "NEWOBJ": _newobj, "BUILD": _build,
    "BINPERSID": _binpersid,
}


def _codes() -> dict[int, Callable[[Machine], None]]:
    import pickletools

    by_name = {op.name: op.code.encode("latin-1")[0] for op in pickletools.opcodes}
    return {by_name[name]: handler for name, handler in _HANDLERS.items()}


OPCODES = _codes()
OPCODE_NAMES = frozenset(_HANDLERS)  # what real checkpoints use (the census tests keep each inside it)
