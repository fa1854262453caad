"""The kinds of rule for the classes and functions a checkpoint's pickles name: records rebuilt from their
attributes, enum members, named tuples, functions. Each accepts only the arguments and states real checkpoints give
it, checked before any of them reaches a constructor, and builds the object itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import MAX_KEY_ITEMS, Builder, Callee, Damaged, Refused, shown


# -- stand-ins for megatron's and TransformerEngine's classes where they are not imported -------------------------
class Inert:
    """Stands in for a class of megatron's (or TransformerEngine's): holds the state, runs nothing."""

    def __repr__(self) -> str:
        return f"<inert {type(self).__module__}.{type(self).__qualname__}>"


class InertEnum:
    """Stands in for a member of an enum of megatron's: its class name and value."""

    def __init__(self, qualname: str, value: Any) -> None:
        self.qualname, self.value = qualname, value

    def __repr__(self) -> str:
        return f"<inert {self.qualname}: {shown(self.value)}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InertEnum) and (self.qualname, self.value) == (other.qualname, other.value)

    def __hash__(self) -> int:
        return hash((self.qualname, self.value))


PLAIN = (str, int, float, bool, type(None))


def plain(v: Any) -> bool:
    """A scalar, or a flat tuple of at most MAX_KEY_ITEMS scalars (hashed and compared at no more cost)."""
    if type(v) in PLAIN:
        return True
    return type(v) is tuple and len(v) <= MAX_KEY_ITEMS and all(type(x) in PLAIN for x in v)


def attrs(state: Any, what: str) -> dict[str, Any]:
    """A BUILD state that only sets attributes: a dict of attribute names, no dunders. The values are what the
    machine made: data."""
    if type(state) is not dict:
        raise Refused(f"BUILD on a {what} with a {type(state).__name__} state (only a dict of attributes)")
    for key in state:
        if type(key) is not str or key.startswith("__"):
            raise Refused(f"BUILD on a {what} setting {shown(key)}")
    return state


Check = Callable[[Any], bool]  # one field's value -> whether a checkpoint could hold it


class Record(Callee):
    """A plain class rebuilt as pickle's default protocol does (NEWOBJ with no arguments, then BUILD with a dict
    of its attributes): ``argparse.Namespace``, DCP's dataclasses, megatron's config dataclasses.

    ``fields``: each attribute the class may be given and a check of its value (DCP's dataclasses: the types their
    readers rely on, so that ``offset`` is a non-negative int and ``storage_data`` a dict of indexes); those in
    ``required`` must be there. Without ``fields`` any attribute that is no dunder is set (megatron's classes,
    inert on the launch side). ``setstate``: the class's own pure-Python ``__setstate__`` (DCP's
    TensorProperties), after ``state_check``. ``key``: its hash reads only checked fields (DCP's MetadataIndex), so
    it may be a dict key."""

    def __init__(self, name: str, cls: type | None, setstate: Any = None, state_check: Any = None,
                 fields: dict[str, Check] | None = None, required: frozenset[str] = frozenset(),
                 key: bool = False) -> None:
        self.name = name
        if cls is None:
            module, _, qual = name.rpartition(".")
            cls = type(qual, (Inert,), {"__module__": module, "__qualname__": qual})
        elif cls.__new__ is not object.__new__:
            raise TypeError(f"{name} is not a plain class")  # a rule table mistake, never a file's
        self.cls = cls
        self.setstate, self.state_check = setstate, state_check
        self.fields, self.required, self.key = fields, required, key

    def newobj(self, args: tuple, machine: Builder) -> Any:
        if args:
            raise Refused(f"NEWOBJ of {self.name} with arguments (it is rebuilt from its state)")
        return machine.made(object.__new__(self.cls), self, record=True, key=self.key)

    def build(self, obj: Any, state: Any, machine: Builder) -> None:
        machine.built(obj, state)
        if self.setstate is not None:
            if not self.state_check(state):
                raise Refused(f"BUILD on a {self.name} with a state it never saves")
            self.setstate(obj, state)
            return
        attrs(state, self.name)
        machine.charge(len(state), f"{self.name} attributes")
        if self.fields is not None:
            self._check_fields(state)
        obj.__dict__.update(state)

    def _check_fields(self, state: dict[str, Any]) -> None:
        assert self.fields is not None
        for name, value in state.items():
            check = self.fields.get(name)
            if check is None:
                raise Refused(f"BUILD on a {self.name} setting {shown(name)} (none of its fields)")
            if not check(value):
                raise Refused(f"a {self.name} whose {name} is {shown(value)}")
        missing = self.required - state.keys()
        if missing:
            raise Damaged(f"a {self.name} without its {', '.join(sorted(missing))}")


class Enumerated(Callee):
    """An enum member rebuilt by value (REDUCE of the class on one plain value): a lookup, nothing runs."""

    def __init__(self, name: str, cls: Any) -> None:
        self.name, self.cls = name, cls

    def reduce(self, args: tuple, machine: Builder) -> Any:
        if len(args) != 1 or not plain(args[0]):  # a tuple: TE's Format values
            raise Refused(f"REDUCE calling {self.name} with other than one plain value")
        value = args[0]
        machine.charge(len(value) if type(value) is tuple else 1, self.name)
        if self.cls is None:
            return InertEnum(self.name, value)
        try:
            return self.cls(value)
        except ValueError:
            raise Damaged(f"{shown(value)} is not a member of {self.name}") from None


class NamedTuple(Callee):
    """A namedtuple of plain values (NEWOBJ with its fields): TransformerEngine's ``_FormatHelper``."""

    def __init__(self, name: str, cls: Any) -> None:
        self.name, self.cls = name, cls

    def newobj(self, args: tuple, machine: Builder) -> Any:
        if not plain(args):
            raise Refused(f"NEWOBJ of {self.name} with other than plain values")
        machine.charge(len(args), self.name)
        return self.cls(*args) if self.cls is not None else args


class Function(Callee):
    """A function called by REDUCE, through ``call(args, machine)`` which checks them and calls it."""

    def __init__(self, name: str, call: Callable[[tuple, Builder], Any]) -> None:
        self.name, self._call = name, call

    def reduce(self, args: tuple, machine: Builder) -> Any:
        return self._call(args, machine)
