"""One way through the script: its variables, arguments, functions and the conditions taken to get there.

The reader follows every way a condition it cannot decide allows (:meth:`State.fork`), and folds ways that reach
the same variables back into one (:func:`prune`); past :data:`MAX_PATHS` ways it joins them, and a variable they
disagree on becomes unknown, naming the conditions. So a value is either what every way gives, or unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .errors import BashReadError
from .nodes import FunctionDef
from .values import Chunk, Value

MAX_PATHS = 32
Array = dict[int, Value]
Var = Value | Array


@dataclass
class State:
    vars: dict[str, Var] = field(default_factory=dict)
    exported: frozenset[str] = frozenset()
    positional: tuple[Value, ...] | None = ()
    functions: dict[str, FunctionDef] = field(default_factory=dict)
    tainted: str = ""  # a `source`/`eval` ran: any variable may have been set by it
    when: tuple[str, ...] = ()  # the undecided conditions this way took, as written
    flow: str = ""  # "exit", "return", "break", "continue": skipping to where that ends
    status: int | None = 0  # the last command's exit status (None: only running could tell)
    locals: tuple[dict[str, Var | None], ...] = ()  # per function call: the values `local` hid
    args_known: bool = False  # the script's arguments were given (an unset $3 is then empty, as in bash)
    integers: frozenset[str] = frozenset()  # declare -i: an assignment evaluates its value as arithmetic
    readonly: frozenset[str] = frozenset()  # readonly / declare -r: bash refuses a later assignment
    assoc: frozenset[str] = frozenset()  # declare -A: keys are strings, never read (every element is unknown)
    errexit: bool = False  # set -e: a command that fails outside a condition ends the script

    def fork(self, condition: str) -> State:
        return replace(self, vars=dict(self.vars), functions=dict(self.functions), when=(*self.when, condition),
                       locals=tuple(dict(frame) for frame in self.locals))

    def writable(self, name: str, line: int) -> None:
        """bash refuses to assign a readonly variable and abandons the rest of the command it is in (a whole
        ``if`` or function call): mtk import does not follow that, it says so."""
        if name in self.readonly:
            raise BashReadError(line, f"{name} is readonly: bash refuses this assignment and abandons the rest of "
                                      "the command it is in; mtk import does not read past that (remove the "
                                      "assignment or the readonly)")

    def copy(self) -> State:
        return replace(self, vars=dict(self.vars), functions=dict(self.functions),
                       locals=tuple(dict(frame) for frame in self.locals))

    def signature(self) -> tuple:
        return (tuple(sorted((k, _frozen(v)) for k, v in self.vars.items())), self.exported, self.positional,
                tuple(sorted((k, id(v)) for k, v in self.functions.items())), self.tainted, self.flow,
                tuple(tuple(sorted((k, _frozen(v)) for k, v in f.items())) for f in self.locals), self.integers,
                self.readonly, self.assoc, self.errexit)


def _frozen(value: Var | None) -> object:
    """A value to compare states by; an array by identity (arrays are replaced, never changed in place, so equal
    identity is equal content; two equal copies only stay two ways, which costs precision, never correctness)."""
    return ("array", id(value)) if isinstance(value, dict) else value


def common_prefix(whens: list[tuple[str, ...]]) -> tuple[str, ...]:
    out: list[str] = []
    for items in zip(*whens, strict=False):
        if any(x != items[0] for x in items):
            break
        out.append(items[0])
    return tuple(out)


def prune(states: list[State]) -> list[State]:
    """Ways with the same variables folded into one (their conditions no longer matter after the fork); past
    :data:`MAX_PATHS` ways, all joined."""
    groups: dict[tuple, list[State]] = {}
    for st in states:
        if st.flow == "exit":
            continue
        groups.setdefault(st.signature(), []).append(st)
    out = []
    for members in groups.values():
        first = members[0]
        if len(members) > 1:
            statuses = {m.status for m in members}
            first = replace(first, when=common_prefix([m.when for m in members]),
                            status=statuses.pop() if len(statuses) == 1 else None)
        out.append(first)
    if len(out) > MAX_PATHS:
        out = [join(out)]
    return out


def join(states: list[State]) -> State:
    """One state for several ways: what they agree on kept, the rest unknown (naming the conditions)."""
    base = states[0].copy()
    base.when = common_prefix([s.when for s in states])
    differing = sorted({c for s in states for c in s.when[len(base.when):]})
    why = ("set differently depending on " + "; ".join(differing[:4]) + ("; ..." if len(differing) > 4 else "")
           if differing else "set differently on the ways through the script")
    names = {k for s in states for k in s.vars}
    for name in names:
        values = [s.vars.get(name) for s in states]
        if all(v == values[0] for v in values):
            continue
        base.vars[name] = Value((Chunk(f"${name}", f"${name} is {why}"),))
    if any(s.positional != base.positional for s in states):
        base.positional = None
    for s in states[1:]:
        for fname, fn in s.functions.items():
            if base.functions.get(fname) is not fn:
                base.functions.pop(fname, None)
                base.tainted = base.tainted or f"function {fname} is {why}"
    base.exported = frozenset().union(*(s.exported for s in states))
    for attribute, option in (("integers", "-i"), ("readonly", "-r"), ("assoc", "-A")):
        every = [getattr(s, attribute) for s in states]
        differ = sorted(frozenset().union(*every) - frozenset.intersection(*every))
        if differ:  # every later assignment would differ between the ways: no value of it could be trusted
            raise BashReadError(None, f"whether ${differ[0]} is declared {option} is {why.removeprefix('set ')}, "
                                      f"past the {MAX_PATHS} ways mtk import follows apart: declare it the same way "
                                      "on every way")
    base.tainted = base.tainted or next((s.tainted for s in states if s.tainted), "")
    statuses = {s.status for s in states}
    base.status = statuses.pop() if len(statuses) == 1 else None
    flows = {s.flow for s in states}
    base.flow = flows.pop() if len(flows) == 1 else ""
    return base
