"""Values as the reader knows them: text where the script decides it, a named unknown where only running (or the
machine it runs on) could tell. A :class:`Value` is a run of :class:`Chunk` s, so that splitting a value that is
partly unknown keeps the known words known (``ARGS="--a 1 --b $X"`` gives ``--a``, ``1``, ``--b`` and an
unknown)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    """Known text, or (``why`` set) the source text that stands for a value only running could tell."""

    text: str
    why: str = ""


@dataclass(frozen=True)
class Value:
    """One value: a variable's, an array element's, or one argument of a command as bash would pass it.

    ``assumed``: readings to check (a default used because the script leaves a variable unset). ``splits``: an
    unknown expanded without quotes, which bash would split into any number of words (or none).
    """

    chunks: tuple[Chunk, ...] = ()
    assumed: tuple[str, ...] = ()
    line: int = 0
    splits: bool = False

    @property
    def text(self) -> str:
        """The value; an unknown part shows as written (``$SLURM_NNODES``, ``$(hostname)``)."""
        return "".join(c.text for c in self.chunks)

    @property
    def unknown(self) -> tuple[str, ...]:
        """Why the value is not known (empty: it is)."""
        return tuple(dict.fromkeys(c.why for c in self.chunks if c.why))

    @property
    def known(self) -> bool:
        return not any(c.why for c in self.chunks)


def known(text: str, line: int = 0, assumed: tuple[str, ...] = ()) -> Value:
    return Value((Chunk(text),) if text else (), assumed, line)


def unknown(shown: str, why: str, line: int = 0, assumed: tuple[str, ...] = ()) -> Value:
    return Value((Chunk(shown, why),), assumed, line)


def concat(values: list[Value], line: int = 0) -> Value:
    """The values joined into one (adjacent known text merged)."""
    chunks: list[Chunk] = []
    for value in values:
        for chunk in value.chunks:
            if chunks and not chunk.why and not chunks[-1].why:
                chunks[-1] = Chunk(chunks[-1].text + chunk.text)
            elif chunk.text or chunk.why:
                chunks.append(chunk)
    assumed = tuple(dict.fromkeys(a for v in values for a in v.assumed))
    return Value(tuple(chunks), assumed, line, any(v.splits for v in values))


def joined(values: list[Value], sep: str = " ", line: int = 0) -> Value:
    """Array elements as one string (``"${A[*]}"``, ``${A[@]}`` in an assignment)."""
    parts: list[Value] = []
    for i, value in enumerate(values):
        if i:
            parts.append(known(sep))
        parts.append(value)
    return concat(parts, line)
