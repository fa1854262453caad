"""Bash's expansions of a word, in bash's order: parameters, arithmetic and command substitutions (never run:
their output is a named unknown), then word splitting of what was expanded without quotes, then quote removal.
Brace expansion and a home directory are named unknowns too; a glob character is read as written and said."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from . import arith, patterns
from .errors import BashSyntaxError
from .limits import WORD_COST, Budget
from .nodes import DQ, Arith, CmdSub, Lit, Opaque, Param, Part, Word
from .state import State, Var
from .values import Chunk, Value, concat, joined, known, unknown

_BRACES = re.compile(r"\{[^{}\s]*(?:,|\.\.)[^{}\s]*\}")
_GLOB = re.compile(r"[*?[]")
_IFS = re.compile(r"[ \t\n]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
BREAK = None  # between the elements of "$@" / "${A[@]}": a word ends there
SHELL_SET = {"RANDOM": "a random number", "SECONDS": "the seconds since the shell started", "PPID": "a process id",
             "BASHPID": "a process id", "HOSTNAME": "the machine's name", "PWD": "the directory the script runs in",
             "OLDPWD": "the directory the script ran in before", "HOME": "the home directory",
             "USER": "the user", "UID": "the user", "EUID": "the user", "BASH_SOURCE": "the script's path",
             "BASH_VERSION": "bash's version"}


@dataclass(frozen=True)
class Seg:
    chunks: tuple[Chunk, ...]
    quoted: bool
    expanded: bool  # the result of an expansion: split when unquoted (literal text never is)
    line: int = 0  # where the text was written, when not where the word is (an array element's line)


class Expander:
    """Expands words for one read (its budget, and the notes of what it assumed)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.markers: dict[str, Chunk] = {}  # names standing for an unknown handed to a child shell

    # ------------------------------------------------------------------------------------------------ entry points

    def fields(self, word: Word, st: State) -> list[Value]:
        """The arguments bash makes of ``word`` (a command's word, a ``for`` list item, an array element)."""
        assumed: list[str] = []
        segs = self._segments(word.parts, st, False, assumed, fields=True, line=word.line)
        return self._split(segs, word, st, assumed)

    def scalar(self, word: Word, st: State) -> Value:
        """``word`` expanded without splitting (an assignment's value, a ``case`` subject, a ``[[`` operand)."""
        assumed: list[str] = []
        segs = self._segments(word.parts, st, False, assumed, fields=False, line=word.line)
        chunks = [c for s in segs for c in ((Chunk(" "),) if s is BREAK else s.chunks)]  # "$@": joined by spaces
        self.budget.fits(sum(len(c.text) for c in chunks), word.line)
        value = concat([Value((c,)) for c in chunks], word.line)
        value = Value(value.chunks, tuple(dict.fromkeys(assumed)), word.line)
        self.budget.spend(len(value.text), word.line)
        return value

    def pattern(self, word: Word, st: State) -> list[tuple[str, bool]] | Value:
        """``word`` as a glob pattern: (text, quoted) pieces, or the unknown value when it is not known."""
        assumed: list[str] = []
        segs = self._segments(word.parts, st, False, assumed, fields=False, line=word.line)
        pieces: list[tuple[str, bool]] = []
        for seg in segs:
            if seg is BREAK:
                continue
            for chunk in seg.chunks:
                if chunk.why:
                    return Value((chunk,), tuple(assumed), word.line)
                pieces.append((chunk.text, seg.quoted))
        return pieces

    def heredoc(self, body: str, line: int, quoted: bool, st: State, sub_word: Callable[[str, int], Word]) -> Value:
        """A here-document's text: expanded unless its delimiter was quoted."""
        if quoted:
            return known(body, line)
        try:
            word = sub_word(body, line)
        except BashSyntaxError as exc:  # bash reads a body only when it runs: one it cannot read is unknown
            return unknown(body, f"the here-document at line {line} does not read as bash text ({exc})", line)
        return self.scalar(word, st)

    # ------------------------------------------------------------------------------------------------ segments

    def _segments(self, parts: tuple[Part, ...], st: State, quoted: bool, assumed: list[str],
                  fields: bool, line: int) -> list:
        """The word's pieces, expanded; what they hold is counted as they are gathered (``"$X$X..."`` or
        ``"${A[@]}${A[@]}..."`` repeated through a word would otherwise be built whole before any bound)."""
        if fields and not quoted and _BRACES.search("".join(p.text if isinstance(p, Lit) and not p.quoted else "x"
                                                            for p in parts)):
            raw = "".join(p.text if isinstance(p, Lit) else "…" for p in parts)  # {a,b}: bash makes several words
            return [Seg((Chunk(raw, f"{raw}: brace expansion is not read by mtk import"),), False, True)]
        out: list = []
        text = pieces = 0
        for part in parts:
            before = len(out)
            self._part(part, st, quoted, assumed, fields, line, out)
            text += sum(sum(len(c.text) for c in seg.chunks) for seg in out[before:] if seg is not BREAK)
            pieces += len(out) - before
            if not fields:  # one value: its own bound first
                self.budget.fits(text, line)
            self.budget.room(text + pieces * WORD_COST, line)
        return out

    def _part(self, part: Part, st: State, quoted: bool, assumed: list[str], fields: bool, line: int,
              out: list) -> None:
        """One part of a word, expanded onto ``out``."""
        if isinstance(part, Lit):
            text = part.text
            out.append(Seg((Chunk(text),) if text else (), quoted or part.quoted, False))
        elif isinstance(part, DQ):
            inner = self._segments(part.parts, st, True, assumed, fields, line)
            spread = any(isinstance(p, Param) and _spreads(p) for p in part.parts)
            if not spread:
                out.append(Seg((), True, False))  # "" is still a word
            out += inner
        elif isinstance(part, Param):
            out += self._param(part, st, quoted, assumed)
        elif isinstance(part, CmdSub):
            why = f"{_short(part.raw)} (line {part.line}): only running the script can tell its output"
            out.append(Seg((Chunk(part.raw, why),), quoted, True))
        elif isinstance(part, Arith):
            out.append(Seg(self._arith(part, st, assumed).chunks, quoted, True))
        elif isinstance(part, Opaque):
            out.append(Seg((Chunk(part.raw, f"{part.why} (line {part.line})"),), quoted, True))

    def _split(self, segs: list, word: Word, st: State, assumed: list[str]) -> list[Value]:
        fields: list[Value] = []
        cur: list[Chunk] = []
        state: dict[str, bool | int] = {"exists": False, "splits": False, "glob": False, "line": 0}
        ifs = st.vars.get("IFS")
        custom_ifs = ifs is not None and not (isinstance(ifs, Value) and ifs.text == " \t\n")

        def flush(force: bool = False) -> None:
            if cur or state["exists"] or force:
                notes = list(assumed)
                if state["glob"]:
                    notes.append(f"{word.raw} (line {word.line}): read as written (bash would put the names of "
                                 "matching files in its place, were there any)")
                self.budget.fits(sum(len(c.text) for c in cur), word.line)
                value = concat([Value((c,)) for c in cur], word.line)
                fields.append(Value(value.chunks, tuple(dict.fromkeys(notes)), int(state["line"]) or word.line,
                                    bool(state["splits"])))
                self.budget.spend(len(value.text), word.line, words=1)
            cur.clear()
            state.update(exists=False, splits=False, glob=False, line=0)

        for seg in segs:
            if seg is BREAK:
                flush()
                continue
            if seg.line and not cur:
                state["line"] = seg.line
            if seg.quoted:
                cur.extend(seg.chunks)
                state["exists"] = True
                continue
            for chunk in seg.chunks:
                if chunk.why:
                    cur.append(chunk)
                    state["splits"] = state["splits"] or seg.expanded
                    continue
                if _GLOB.search(chunk.text):
                    state["glob"] = True
                if not seg.expanded:
                    cur.append(chunk)
                    continue
                if custom_ifs:
                    cur.append(Chunk(chunk.text, "IFS is changed by the script: its word splitting is not read "
                                                 "by mtk import"))
                    continue
                pieces = _IFS.split(chunk.text)
                for k, piece in enumerate(pieces):
                    if k:
                        flush()
                    if piece:
                        cur.append(Chunk(piece))
        flush()
        return fields

    # ------------------------------------------------------------------------------------------------ parameters

    def _param(self, p: Param, st: State, quoted: bool, assumed: list[str]) -> list:
        if p.indirect and p.index is None and not p.op:
            target = self._value_of(p.name, st, p)
            if isinstance(target, Value) and target.known and _NAME.fullmatch(target.text):
                p = Param(target.text, p.raw, p.line)
            else:
                return [self._unknown_seg(p, "an indirect reference mtk import cannot follow", quoted)]
        elif p.indirect and p.index is not None and p.index.raw in ("@", "*") and not p.op:
            current = st.vars.get(p.name)  # ${!A[@]}: the array's indices
            if p.name in st.assoc:
                return [self._unknown_seg(p, "an associative array is not read by mtk import", quoted)]
            if current is None and st.tainted:
                return [Seg(self._tainted(p, st).chunks, quoted, True)]
            keys = [known(str(k)) for k in (sorted(current) if isinstance(current, dict) else
                                            [0] if current is not None else [])]
            return self._spread(keys, quoted, p)
        elif p.indirect:
            return [self._unknown_seg(p, "not read by mtk import", quoted)]
        value = self._value_of(p.name, st, p) if p.index is None or p.name in "@*" else self._element(p, st)
        spread = _spreads(p)
        if p.length:
            if isinstance(value, list):
                count: Value = known(str(len(value))) if p.index is not None else (
                    known(str(len(value[0].text))) if value and value[0].known else self._unset(p, st))
            else:
                count = known(str(len(value.text))) if isinstance(value, Value) and value.known else \
                    (value if isinstance(value, Value) else self._unset(p, st))
                if isinstance(value, Value) and not value.known:
                    count = unknown(p.raw, f"{p.raw} (line {p.line}): the length of a value not known")
            return [Seg(count.chunks, quoted, True)]
        if p.op:
            return self._operator(p, value, st, quoted, assumed, spread)
        if value is None:
            value = self._unset(p, st)
        if isinstance(value, list):
            if spread:
                assumed.extend(a for v in value for a in v.assumed)
                return self._spread(value, quoted, p)
            value = self._joined(value, p.line)
        assumed.extend(value.assumed)
        return [Seg(value.chunks, quoted, True)]

    def _spread(self, values: list[Value], quoted: bool, p: Param) -> list:
        """``"${A[@]}"``: one word per element; unquoted, each element is split on its own."""
        out: list = []
        sep = p.name == "*" or (p.index is not None and p.index.raw == "*")
        if sep and quoted:
            return [Seg(self._joined(values, p.line).chunks, True, True)]
        for k, v in enumerate(values):
            if k:
                out.append(BREAK if quoted else Seg((Chunk(" "),), False, True))
            out.append(Seg(v.chunks, quoted, True, v.line))
        return out

    def _joined(self, values: list[Value], line: int) -> Value:
        """Elements joined by spaces (``"${A[*]}"``, ``$*``), their size bounded before they are joined."""
        self.budget.fits(sum(len(v.text) for v in values) + max(len(values) - 1, 0), line)
        return joined(values)

    def _element(self, p: Param, st: State) -> Value | list[Value] | None:
        index = p.index
        assert index is not None
        if p.name in st.assoc:
            return unknown(p.raw, f"{p.raw} (line {p.line}): an associative array is not read by mtk import")
        current = st.vars.get(p.name)
        if index.raw in ("@", "*"):
            if current is None:
                return None if not st.tainted else self._tainted(p, st)
            return list(current.values()) if isinstance(current, dict) else [current]
        n = self.index_of(index, st)
        if isinstance(n, Value):
            return unknown(p.raw, f"{p.raw} (line {p.line}): its index is not known ({'; '.join(n.unknown)})")
        if current is None:
            return None if not st.tainted else self._tainted(p, st)
        if isinstance(current, dict):
            if n < 0:
                n = max(current) + 1 + n if current else n
            return current.get(n)
        return current if n == 0 else None

    def index_of(self, index: Word, st: State) -> int | Value:
        """An indexed array's subscript: arithmetic on the expanded text."""
        text = self.scalar(index, st)
        if not text.known:
            return text
        try:
            return arith.evaluate(text.text, lambda n: self.arith_lookup(n, st, index.line),
                                  lambda n, v: self.assign_int(n, v, st, index.line), index.line)
        except arith.Unknowable as exc:
            return unknown(index.raw, str(exc))

    def _value_of(self, name: str, st: State, p: Param) -> Value | list[Value] | None:
        """The parameter's value: a scalar, the elements of an array or of ``$@``, or None when unset."""
        line = p.line
        if name in ("@", "*"):
            if st.positional is None:
                return [unknown(p.raw, f"{p.raw} (line {line}): the script's arguments are not known here")]
            return list(st.positional)
        if name == "#":
            if st.positional is None:
                return unknown(p.raw, f"$# (line {line}): the script's arguments are not known here")
            return known(str(len(st.positional)))
        if name.isdigit():
            if name == "0":
                return unknown(p.raw, f"$0 (line {line}): the path the script is run by")
            if st.positional is None:
                return unknown(p.raw, f"{p.raw} (line {line}): the script's arguments are not known here")
            k = int(name)
            return st.positional[k - 1] if k <= len(st.positional) else None
        if name == "?":
            if st.status is None:
                return unknown(p.raw, f"$? (line {line}): the exit status of a command only running can tell")
            return known(str(st.status))
        if name in ("$", "!", "-", "_"):
            return unknown(p.raw, f"{p.raw} (line {line}): only running the script can tell")
        if name == "LINENO":
            return known(str(line))
        current: Var | None = st.vars.get(name)
        if current is None and name in self.markers:
            return Value((self.markers[name],))
        if current is None:
            return self._tainted(p, st) if st.tainted else None
        return list(current.values()) if isinstance(current, dict) and _spreads(p) else \
            (current.get(0) if isinstance(current, dict) else current)

    def _tainted(self, p: Param, st: State) -> Value:
        return unknown(p.raw, f"{p.raw} (line {p.line}) may be set by {st.tainted}")

    def _unset(self, p: Param, st: State) -> Value:
        """A parameter the script leaves unset: empty when bash's arguments are given, else unknown."""
        name = p.name
        if name.isdigit():
            if st.args_known:
                return known("")
            return unknown(p.raw, f"{p.raw} (line {p.line}) is the script's argument {name}: pass the script's "
                                  "arguments after it (mtk import SCRIPT ARG...)")
        if name in SHELL_SET:
            return unknown(p.raw, f"{p.raw} (line {p.line}) is {SHELL_SET[name]}, known only where the script runs")
        return unknown(p.raw, f"{p.raw} (line {p.line}): {name} is not set in the script (it comes from where the "
                              "script runs)")

    def _unset_note(self, p: Param, st: State, what: str) -> tuple[str, ...]:
        if p.name.isdigit() and st.args_known:
            return ()
        who = f"the script's argument {p.name}" if p.name.isdigit() else p.name
        return (f"{p.raw} (line {p.line}): {who} is not set in the script; {what}",)

    def _operator(self, p: Param, value: Value | list[Value] | None, st: State, quoted: bool,
                  assumed: list[str], spread: bool) -> list:
        op = p.op
        if isinstance(value, list) and op in ("#", "##", "%", "%%", "/", "//", "/#", "/%", "^", "^^", ",", ",,") \
                and spread:
            done = [self._one(p, v, st, assumed) for v in value]
            return self._spread([d for d in done if isinstance(d, Value)], quoted, p)
        if isinstance(value, list):
            if op == ":" and spread:
                if p.name in ("@", "*"):  # ${@:1}: counted from $0
                    value = [unknown("$0", f"$0 (line {p.line}): the path the script is run by"), *value]
                return self._spread(self._slice_list(p, value, st), quoted, p)
            value = self._joined(value, p.line) if value else None
        if op in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            result = self._default(p, value, st, assumed)
        else:
            result = self._one(p, value if value is not None else self._unset(p, st), st, assumed)
        return [Seg(result.chunks, quoted, True)]

    def _default(self, p: Param, value: Value | None, st: State, assumed: list[str]) -> Value:
        colon = p.op.startswith(":")
        kind = p.op[-1]
        if value is not None and colon and not value.known and not any(c.text and not c.why for c in value.chunks):
            return unknown(p.raw, f"{p.raw} (line {p.line}): whether {p.name} is empty is not known "
                                  f"({'; '.join(value.unknown)})")
        unset = value is None or (colon and value.text == "")
        if kind == "+":
            if unset:
                assumed.extend(self._unset_note(p, st, "read as unset") if value is None else ())
                return known("")
            return self.scalar(p.arg, st) if p.arg is not None else known("")
        if not unset:
            assert value is not None
            assumed.extend(value.assumed)
            return value
        if kind == "?":
            return unknown(p.raw, f"{p.raw} (line {p.line}): the script stops here unless {p.name} is set where "
                                  "it runs")
        default = self.scalar(p.arg, st) if p.arg is not None else known("")
        note = self._unset_note(p, st, f"its default {default.text!r} was used") if value is None else ()
        result = Value(default.chunks, (*default.assumed, *note), p.line)
        if kind == "=" and not p.name.isdigit():
            st.writable(p.name, p.line)
            st.vars[p.name] = result
        assumed.extend(result.assumed)
        return result

    def _one(self, p: Param, value: Value, st: State, assumed: list[str]) -> Value:
        """The pattern, replacement, substring and case operators on one known value."""
        if not value.known:
            return unknown(p.raw, f"{p.raw} (line {p.line}): {'; '.join(value.unknown)}")
        assumed.extend(value.assumed)
        text, op = value.text, p.op
        if op in ("#", "##", "%", "%%", "/", "//", "/#", "/%"):
            pat = self.pattern(p.arg, st) if p.arg is not None else []
            if isinstance(pat, Value):
                return unknown(p.raw, f"{p.raw} (line {p.line}): its pattern is not known")
            if op.startswith("/"):
                repl = self.scalar(p.arg2, st) if p.arg2 is not None else known("")
                if not repl.known:
                    return unknown(p.raw, f"{p.raw} (line {p.line}): its replacement is not known")
                out = patterns.replace(text, pat, repl.text, op, lambda n: self.budget.fits(n, p.line))
            else:
                out = patterns.strip(text, pat, op)
            if out is None:
                return unknown(p.raw, f"{p.raw} (line {p.line}): a pattern too costly to match")
            return known(out, p.line)
        if op == ":":
            piece = self._slice_text(p, text, st)
            return piece if isinstance(piece, Value) else known(piece, p.line)
        case = {"^^": "U", ",,": "L", "^": "u", ",": "l"}.get(op) if p.arg is None or not p.arg.raw else None
        if op == "@" and p.arg is not None and p.arg.raw in ("U", "L", "u"):
            case = p.arg.raw
        if case is not None:
            changed = patterns.change_case(text, case)
            if changed is None:
                return unknown(p.raw, f"{p.raw} (line {p.line}): the case of letters beyond ASCII depends on the "
                                      "locale where the script runs")
            return known(changed, p.line)
        return unknown(p.raw, f"{p.raw} (line {p.line}): this expansion is not read by mtk import")

    def _bounds(self, p: Param, size: int, st: State) -> tuple[int, int] | Value:
        offset = self._int_operand(p.arg, st, p)
        if isinstance(offset, Value):
            return offset
        length = self._int_operand(p.arg2, st, p) if p.arg2 is not None else size
        if isinstance(length, Value):
            return length
        start = offset if offset >= 0 else max(size + offset, 0)
        end = start + length if length >= 0 else size + length
        return min(start, size), max(min(end, size), min(start, size))

    def _slice_text(self, p: Param, text: str, st: State) -> str | Value:
        bounds = self._bounds(p, len(text), st)
        return bounds if isinstance(bounds, Value) else text[bounds[0]:bounds[1]]

    def _slice_list(self, p: Param, values: list[Value], st: State) -> list[Value]:
        bounds = self._bounds(p, len(values), st)
        return [bounds] if isinstance(bounds, Value) else values[bounds[0]:bounds[1]]

    def _int_operand(self, word: Word | None, st: State, p: Param) -> int | Value:
        if word is None:
            return 0
        text = self.scalar(word, st)
        if not text.known:
            return unknown(p.raw, f"{p.raw} (line {p.line}): its offset is not known")
        try:
            return arith.evaluate(text.text, lambda n: self.arith_lookup(n, st, p.line),
                                  lambda n, v: self.assign_int(n, v, st, p.line), p.line)
        except arith.Unknowable as exc:
            return unknown(p.raw, f"{p.raw} (line {p.line}): {exc}")

    def _unknown_seg(self, p: Param, why: str, quoted: bool) -> Seg:
        return Seg((Chunk(p.raw, f"{p.raw} (line {p.line}): {why}"),), quoted, True)

    # ------------------------------------------------------------------------------------------------ arithmetic

    def _arith(self, part: Arith, st: State, assumed: list[str]) -> Value:
        text = self.scalar(part.expr, st)
        assumed.extend(text.assumed)
        if not text.known:
            return unknown(part.raw, f"{_short(part.raw)} (line {part.line}) uses what is not known: "
                                     f"{'; '.join(text.unknown)}")
        try:
            n = arith.evaluate(text.text, lambda name: self.arith_lookup(name, st, part.line, assumed),
                               lambda name, v: self.assign_int(name, v, st, part.line), part.line)
        except arith.Unknowable as exc:
            return unknown(part.raw, f"{_short(part.raw)} (line {part.line}): {exc}")
        return known(str(n), part.line)

    def arith_lookup(self, name: str, st: State, line: int, assumed: list[str] | None = None,
                     depth: int = 0) -> int:
        current = st.vars.get(name)
        if isinstance(current, dict):
            current = current.get(0)
        if current is None:
            if st.tainted:
                raise arith.Unknowable(f"${name} may be set by {st.tainted}")
            raise arith.Unknowable(f"${name} is not set in the script (it comes from where the script runs)")
        if not current.known:
            raise arith.Unknowable("; ".join(current.unknown))
        if assumed is not None:
            assumed.extend(current.assumed)
        text = current.text.strip()
        if not text:
            return 0
        if re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]+|[0-9]+#[0-9a-zA-Z@_]+", text):
            return arith.number(text)
        if depth > 8:
            raise arith.Unknowable(f"${name}: expression recursion level exceeded")
        return arith.evaluate(text, lambda n: self.arith_lookup(n, st, line, assumed, depth + 1),
                              lambda n, v: self.assign_int(n, v, st, line), line)

    def assign_int(self, name: str, value: int, st: State, line: int) -> None:
        st.writable(name, line)
        st.vars[name] = known(str(value), line)


def _spreads(p: Param) -> bool:
    """``$@``, ``$*``, ``${A[@]}``, ``${A[*]}``: one word per element."""
    return p.name in ("@", "*") or (p.index is not None and p.index.raw in ("@", "*"))


def _short(raw: str) -> str:
    one = " ".join(raw.split())
    return one if len(one) <= 60 else one[:57] + "..."
