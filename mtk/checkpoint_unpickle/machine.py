"""The pickle machine: runs a pickle's opcodes one by one in Python, so that each opcode, not only each global, is a
decision of mtk's.

``pickle.Unpickler`` lets a file choose what runs: ``find_class`` filters the globals, but NEWOBJ_EX then calls an
admitted class with keyword arguments the file chooses, BUILD calls ``setattr`` on whatever is on the stack (a class
too), and every admitted callable receives arguments nobody checked. Here:

- only the opcodes real checkpoints use are run (:data:`OPCODE_NAMES`); any other is refused by name before it runs;
- a global is never imported by the name the file gives: GLOBAL/STACK_GLOBAL look the pair up in the rules
  (:mod:`.rules`) and push what the rule gives: a value (a dtype) or a :class:`~.base.Callee` that checks its
  arguments;
- REDUCE and NEWOBJ call only a Callee, with positional arguments (kwargs have no opcode here);
- BUILD applies a state once, only to an object a Callee made in this load and marked buildable, through that
  Callee's own rule; never to a class, a value or a container;
- APPEND(S) only into lists, SETITEM(S) only into dicts, BINPERSID only through the loader's storage rule.

What a pickle builds is bounded as it is built (:mod:`.base` has the limits), so that no later use of it — a hash,
a comparison, a walk — can be turned against the process:

- a container is sealed once it is placed inside another (or handed to a rule): nothing is appended to it or set
  in it after that, so a value a rule checked stays as it was checked, and no container can hold itself;
- each container's nesting depth is known when it is built (a sealed value never changes); past
  :data:`~.base.MAX_DEPTH` the pickle is refused (a tuple nested a million deep used as a dict key would make
  ``hash`` recurse in C until the process dies);
- a dict key is a scalar, a value a rule built, a record whose hash reads only checked fields, or a flat tuple of
  those: hashing it never recurses and costs what its bytes cost.

A refusal raises :class:`~.base.Refused` naming the opcode or the global; a file that is cut short or inconsistent
raises :class:`~.base.Damaged`. Neither runs anything of the file.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .base import BUDGET_BASE, BUDGET_PER_BYTE, MAX_DEPTH, MAX_KEY_ITEMS, Callee, Damaged, Refused
from .opcodes import HANDLED, Persistent, Reader, Resolver, codes, opcode_name

_SCALARS = frozenset({str, int, float, bool, type(None), bytes})

# the opcodes run inline in Machine.load, by name (each is in the loop below, by its byte)
INLINE = frozenset({"MEMOIZE", "LONG_BINGET", "BINGET", "BININT1", "BININT2", "BININT", "MARK", "EMPTY_TUPLE",
                    "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_LIST", "APPEND", "APPENDS", "EMPTY_DICT",
                    "SETITEM", "SETITEMS", "NEWOBJ", "REDUCE", "BUILD", "SHORT_BINUNICODE", "NONE", "STOP"})
OPCODE_NAMES = INLINE | frozenset(HANDLED)  # what real checkpoints use (the census tests keep each inside it)
_HANDLERS = {codes()[name]: handler for name, handler in HANDLED.items()}


class Machine(Reader):
    """One load of one pickle. ``resolve`` turns GLOBAL into a value or Callee; ``persistent`` serves BINPERSID
    (None: the file kind holds none)."""

    def __init__(self, data: bytes | bytearray | memoryview, resolve: Resolver,
                 persistent: Persistent | None = None, start: int = 0) -> None:
        super().__init__(data, resolve, persistent, start)
        # id -> nesting depth of each container (tuple, list, dict, record) this load made: negative while it is
        # open (a list or dict not yet placed anywhere, a record not yet built), positive once sealed. No entry:
        # sealed at depth 1. Every such object sets its entry when it is made, so an id a dead one had is never read.
        self.depth: dict[int, int] = {}
        self.tracked: set[type] = {tuple, list, dict, OrderedDict}  # the types the depth map is read for
        self.key_records: set[type] = set()  # record types a dict key may be (hashed over checked fields only)
        self._buildable: dict[int, tuple[Any, Callee]] = {}  # id -> (the object, kept alive; its rule)
        self.budget = BUDGET_PER_BYTE * (len(self.data) - start) + BUDGET_BASE

    # -- the Builder contract (.base) for rules ---------------------------------------------------------------
    def made(self, obj: Any, rule: Callee, record: bool = False, key: bool = False) -> Any:
        """Mark ``obj`` (made by ``rule`` in this load) as one BUILD may apply a state to, once, through ``rule``.
        ``record``: it holds what its state holds (nesting is tracked, and it is sealed once placed anywhere);
        ``key``: its type's hash reads only fields its rule checks, so it may be a dict key."""
        self._buildable[id(obj)] = (obj, rule)
        if record:
            self.tracked.add(type(obj))
            self.depth[id(obj)] = -1
            if key:
                self.key_records.add(type(obj))
        return obj

    def opened(self, container: Any) -> Any:
        """A new empty list or dict a rule made (OrderedDict): open for APPEND/SETITEM until placed anywhere."""
        self.depth[id(container)] = -1
        return container

    def charge(self, units: int, what: str) -> None:
        """Count ``units`` (elements, bytes, attributes) a rule builds against the pickle's budget."""
        self.budget -= units
        if self.budget < 0:
            raise Refused(f"{what} built from shared values again and again (more than {BUDGET_PER_BYTE} units "
                          "per byte of the pickle)")

    def built(self, obj: Any, state: Any) -> None:
        """``obj`` takes ``state``'s contents (BUILD): it must still be open, and ``state`` is sealed."""
        key = id(obj)
        if self.depth.get(key, 0) >= 0:
            raise Refused(f"BUILD on a {type(obj).__name__} already placed inside another value (a state is set "
                          "once, before the object is used)")
        d = self.nest(state)
        if d > 1:
            self.depth[key] = d
        else:
            del self.depth[key]

    def nest(self, item: Any) -> int:
        """``item`` goes inside another value: seal it; its depth (0 for a scalar or a value a rule built)."""
        if type(item) not in self.tracked:
            return 0
        key = id(item)
        d = self.depth.get(key)
        if d is None:
            return 1
        if d < 0:
            d = -d
            if d > 1:
                self.depth[key] = d
            else:
                del self.depth[key]
        return d

    # -- containers -------------------------------------------------------------------------------------------
    def _new_tuple(self, items: tuple) -> tuple:
        deepest = 0
        for item in items:
            if type(item) in self.tracked:
                d = self.nest(item)
                if d > deepest:
                    deepest = d
        if deepest:
            if deepest >= MAX_DEPTH:
                raise Refused(f"values nested more than {MAX_DEPTH} deep")
            self.depth[id(items)] = deepest + 1
        else:
            self.depth.pop(id(items), None)  # a new tuple: the id may be one a dead value had
        return items

    def _reopen(self, target: Any, op: str, deepest: int) -> None:
        """After ``op`` nested values ``deepest`` deep into ``target``: it must be open; its depth grows."""
        key = id(target)
        d = self.depth.get(key, 0)
        if d >= 0:
            raise Refused(f"{op} into a {type(target).__name__} already placed inside another value (or into "
                          "itself)")
        if deepest >= MAX_DEPTH:
            raise Refused(f"values nested more than {MAX_DEPTH} deep")
        if deepest + 1 > -d:
            self.depth[key] = -(deepest + 1)

    def _fill_list(self, items: list[Any], op: str) -> None:
        target = self._top()
        if type(target) is not list:
            raise Refused(f"{op} into a {type(target).__name__} (only into a list)")
        deepest = 0
        tracked = self.tracked
        for item in items:
            if type(item) in tracked:
                d = self.nest(item)
                if d > deepest:
                    deepest = d
        self._reopen(target, op, deepest)
        target.extend(items)

    def _key(self, key: Any) -> int:
        """Check a dict key before it is hashed; its depth."""
        kind = type(key)
        if kind in _SCALARS:
            return 0
        if kind is tuple:
            if len(key) > MAX_KEY_ITEMS or any(type(x) in self.tracked for x in key):
                raise Refused(f"a dict key that is a tuple of {len(key)} values or holding other values (a key is "
                              f"a value or a flat tuple of at most {MAX_KEY_ITEMS})")
            return 1
        if kind in self.tracked and kind not in self.key_records:
            raise Refused(f"a dict key that is a {kind.__name__}")
        return self.nest(key)

    def _fill_dict(self, items: list[Any], op: str) -> None:
        target = self._top()
        if type(target) is not dict and type(target) is not OrderedDict:
            raise Refused(f"{op} into a {type(target).__name__} (only into a dict)")
        deepest = 0
        tracked = self.tracked
        for i in range(0, len(items), 2):
            key, value = items[i], items[i + 1]
            if type(key) is not str:
                d = self._key(key)
                if d > deepest:
                    deepest = d
            if type(value) in tracked:
                d = self.nest(value)
                if d > deepest:
                    deepest = d
        self._reopen(target, op, deepest)
        try:
            for i in range(0, len(items), 2):
                target[items[i]] = items[i + 1]
        except TypeError:
            raise Damaged("a dict key in the pickle cannot be hashed") from None

    def _pop_mark(self) -> list[Any]:
        if not self.marks:
            raise Damaged("an opcode needs a MARK the pickle never set")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    # -- running ----------------------------------------------------------------------------------------------
    def load(self) -> Any:
        """Run the pickle to its STOP; return the object. ``self.end``: the offset just past STOP.

        The frequent opcodes of a DCP ``.metadata`` (memo reads and writes, small ints, marks, tuples, dicts,
        calls) and every one that nests a value run inline, the rest by their handler: a large model's metadata
        is tens of MB."""
        data, stack, memo, marks = self.data, self.stack, self.memo, self.marks
        depth, tracked, buildable, nest = self.depth, self.tracked, self._buildable, self.nest
        size = len(data)
        pos = self.pos
        floor = marks[-1] if marks else 0  # the stack below the last MARK is out of reach until it is popped
        while True:
            if pos >= size:
                raise Damaged("the pickle ends before its STOP")
            code = data[pos]
            pos += 1
            if code == 0x94:  # MEMOIZE
                if len(stack) <= floor:
                    raise Damaged("MEMOIZE with nothing to memoize")
                memo[len(memo)] = stack[-1]
            elif code == 0x6A or code == 0x68:  # LONG_BINGET, BINGET
                if code == 0x6A:
                    index = int.from_bytes(data[pos:pos + 4], "little")
                    pos += 4
                else:
                    index = data[pos] if pos < size else 0
                    pos += 1
                if pos > size:
                    raise Damaged("the pickle ends inside an opcode's argument")
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
                floor = len(stack)
                marks.append(floor)
            elif code == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif code == 0x81 or code == 0x52:  # NEWOBJ, REDUCE
                if len(stack) < floor + 2:
                    raise Damaged("an opcode pops more than the pickle pushed")
                args = stack.pop()
                target = stack.pop()
                op = "REDUCE" if code == 0x52 else "NEWOBJ"
                if not isinstance(target, Callee):
                    raise Refused(f"{op} calling a {type(target).__name__} (only an admitted class or function)")
                if type(args) is not tuple:
                    raise Refused(f"{op} of {target.name} with arguments that are not a tuple")
                stack.append(target.reduce(args, self) if code == 0x52 else target.newobj(args, self))
            elif code == 0x62:  # BUILD
                if len(stack) < floor + 2:
                    raise Damaged("an opcode pops more than the pickle pushed")
                state = stack.pop()
                obj = stack[-1]
                entry = buildable.pop(id(obj), None)
                if entry is None or entry[0] is not obj:
                    raise Refused(_unbuildable(obj))
                entry[1].build(obj, state, self)
            elif code == 0x75 or code == 0x65 or code == 0x74:  # SETITEMS, APPENDS, TUPLE
                if not marks:
                    raise Damaged("an opcode needs a MARK the pickle never set")
                items = stack[floor:]
                del stack[floor:]
                marks.pop()
                floor = marks[-1] if marks else 0
                if code == 0x75:
                    if len(items) % 2:
                        raise Damaged("SETITEMS with an odd number of items")
                    self._fill_dict(items, "SETITEMS")
                elif code == 0x65:
                    self._fill_list(items, "APPENDS")
                else:
                    stack.append(self._new_tuple(tuple(items)))
            elif code == 0x7D:  # EMPTY_DICT
                new: Any = {}
                depth[id(new)] = -1
                stack.append(new)
            elif code == 0x85:  # TUPLE1
                if len(stack) <= floor:
                    raise Damaged("an opcode pops more than the pickle pushed")
                item = stack[-1]
                t: tuple = (item,)
                if type(item) in tracked:
                    d = nest(item) + 1
                    if d > MAX_DEPTH:
                        raise Refused(f"values nested more than {MAX_DEPTH} deep")
                    depth[id(t)] = d
                else:
                    depth.pop(id(t), None)
                stack[-1] = t
            elif code == 0x86 or code == 0x87:  # TUPLE2, TUPLE3
                n = code - 0x84
                if len(stack) < floor + n:
                    raise Damaged("an opcode pops more than the pickle pushed")
                t = tuple(stack[-n:])
                del stack[-n:]
                stack.append(self._new_tuple(t))
            elif code == 0x4D or code == 0x4A:  # BININT2, BININT
                n = 2 if code == 0x4D else 4
                if pos + n > size:
                    raise Damaged("the pickle ends inside an opcode's argument")
                stack.append(int.from_bytes(data[pos:pos + n], "little", signed=code == 0x4A))
                pos += n
            elif code == 0x8C:  # SHORT_BINUNICODE
                n = data[pos] if pos < size else 0
                end = pos + 1 + n
                if end > size:
                    raise Damaged("the pickle ends inside an opcode's argument")
                try:
                    stack.append(data[pos + 1:end].decode("utf-8", "surrogatepass"))
                except UnicodeDecodeError:
                    raise Damaged("a string in the pickle is not UTF-8") from None
                pos = end
            elif code == 0x4E:  # NONE
                stack.append(None)
            elif code == 0x5D:  # EMPTY_LIST
                new = []
                depth[id(new)] = -1
                stack.append(new)
            elif code == 0x61:  # APPEND
                if len(stack) < floor + 2:
                    raise Damaged("an opcode pops more than the pickle pushed")
                self._fill_list([stack.pop()], "APPEND")
            elif code == 0x73:  # SETITEM
                if len(stack) < floor + 3:
                    raise Damaged("an opcode pops more than the pickle pushed")
                value = stack.pop()
                self._fill_dict([stack.pop(), value], "SETITEM")
            elif code == 0x2E:  # STOP
                if len(stack) != 1 or marks:
                    raise Damaged("the pickle stops with a stack that is not one object")
                self.pos = self.end = pos
                return stack.pop()
            else:
                handler = _HANDLERS.get(code)
                if handler is None:
                    raise Refused(f"pickle opcode {opcode_name(code)}")
                self.pos = pos
                handler(self)
                pos = self.pos


def _unbuildable(obj: Any) -> str:
    what = (f"the class {getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')} itself"
            if isinstance(obj, type) else
            f"{obj.name} itself" if isinstance(obj, Callee) else f"a {type(obj).__name__}")
    return f"BUILD on {what} (a state only goes once into an object this load made)"
