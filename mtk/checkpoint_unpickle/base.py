"""What the machine and the rules share: the two verdicts, the limits, and the contract between them.

A rule (:class:`Callee`) sees the machine only through :class:`Builder`: it marks what it made, charges what it
copies against the file's budget, and seals what it takes in. The limits are the machine's promises about any file,
hostile or not: nothing nests deeper than :data:`MAX_DEPTH` (a hash or a recursive walk of a value stays shallow),
no dict key is a nested value (hashing one never recurses), and what admitted callables build is bounded by the
pickle's own size (:data:`BUDGET_PER_BYTE`), however many times a memoised value is handed to them again.
"""

from __future__ import annotations

from typing import Any, Protocol

from mtk.exitcodes import BadInput

# Containers inside containers: mtk's and Megatron-LM's checkpoints nest at most 7 deep (the census tests measure
# it). Deeper is refused as it is built: hashing, comparing or walking a value never recurses further than this.
MAX_DEPTH = 64
# A tuple used as a dict key holds at most this many values, none of them a container (real keys: a pair of dtypes).
MAX_KEY_ITEMS = 64
# The most dimensions a tensor, array or torch.Size may have (numpy's own limit; torch's is lower).
MAX_RANK = 64
# What admitted callables may build (elements of a torch.Size, bytes of an array or a path, attributes set), per
# byte of the pickle, plus a floor: a real pickle builds each once, from bytes of its own.
BUDGET_PER_BYTE = 4
BUDGET_BASE = 1 << 20


class Refused(BadInput):
    """The pickle holds something no checkpoint holds; ``thing`` names it (an opcode, a global, a misuse). The
    reader (:func:`mtk.checkpoint_unpickle._run`) says it again naming the file; nothing of the file ran."""

    def __init__(self, thing: str) -> None:
        super().__init__(thing)
        self.thing = thing


class Damaged(BadInput, ValueError):
    """The pickle is cut short or inconsistent (a damaged file, not a hostile one); the reader names the file."""


class Builder(Protocol):
    """The machine as a rule sees it (:class:`~.machine.Machine`)."""

    data: bytes
    hollow: bool

    def made(self, obj: Any, rule: Callee, record: bool = False, key: bool = False) -> Any: ...

    def opened(self, container: Any) -> Any: ...

    def charge(self, units: int, what: str) -> None: ...

    def built(self, obj: Any, state: Any) -> None: ...


class Callee:
    """An admitted callable as the machine sees it: it checks its arguments and builds the object itself.

    ``name`` is the global's dotted name (for messages). A subclass overrides ``reduce``/``newobj``/``build``; the
    defaults refuse, so a rule admits exactly the uses it spells out."""

    name = "?"

    def reduce(self, args: tuple, machine: Builder) -> Any:
        raise Refused(f"REDUCE calling {self.name}")

    def newobj(self, args: tuple, machine: Builder) -> Any:
        raise Refused(f"NEWOBJ of {self.name}")

    def build(self, obj: Any, state: Any, machine: Builder) -> None:
        raise Refused(f"BUILD on a {self.name}")


class Token(Callee):
    """A global that is only ever an argument (``numpy.ndarray`` for ``_reconstruct``, a storage type in a
    persistent id): calling or building it is refused by the Callee defaults."""

    def __init__(self, name: str) -> None:
        self.name = name


_SCALARS = (str, bytes, int, float, bool, type(None))


def shown(value: Any, level: int = 2) -> str:
    """A value of the file's for a message: short, shallow, one line. Only scalars and tuples/lists of them are
    spelled out (a file's value may be 1 MB, or an object whose own ``repr`` walks a graph that shares its parts
    so that the full text is exponential in the file's size); anything else by its type's name."""
    kind = type(value)
    if kind is int and value.bit_length() > 128:
        return f"an int of {value.bit_length()} bits"
    if kind in _SCALARS:
        text = repr(value[:41] if kind in (str, bytes) else value)
        return text if len(text) <= 40 else text[:37] + "..."
    if kind in (tuple, list) and level > 0:
        inner = ", ".join(shown(v, level - 1) for v in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"({inner}{',' if len(value) == 1 else ''})" if kind is tuple else f"[{inner}]"
    return f"a {type(value).__name__}"
