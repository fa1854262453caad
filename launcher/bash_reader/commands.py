"""Simple commands: assignments, the builtins that change what the script knows (``export``, ``declare``, ``local``,
``unset``, ``set``, ``shift``, ``read``, ``exit``, ``return``, ``test`` ...), functions, and the commands the script
hands to another shell (``bash -c TEXT``, ``sbatch <<EOF``), read as scripts of their own. Every other command is
recorded with its words, never run. ``source``/``.`` and ``eval`` run text the reader does not follow: every value
read after them is unknown (it may have been set there)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import LimitError
from .expand import Expander
from .limits import MAX_CALL_DEPTH, Budget, Depth
from .nodes import Assign, Node, Seq, Simple, Word
from .script import Command, Script, sbatch_lines
from .state import Array, State, Var
from .values import Chunk, Value, concat, known, unknown

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh"})


class CommandRunner:
    """Runs simple commands; ``builtins`` (given by the runner that follows the script, :mod:`.run`, from
    :mod:`.builtins`, which needs this class's methods) handle the commands that change what the reader knows."""

    builtins: Mapping[str, Callable[[Any, Simple, list[Any], State], list[State]]] = {}

    def __init__(self, budget: Budget, depth: Depth, script: Script, via: str = "",
                 wrapper: tuple[Value, ...] = (), sbatch: tuple[str, ...] = (), calls: int = 0,
                 markers: dict[str, Chunk] | None = None) -> None:
        self.budget, self.depth, self.script = budget, depth, script
        self.via, self.wrapper, self.sbatch, self.calls = via, wrapper, sbatch, calls
        self.ex = Expander(budget)
        self.ex.markers = markers or {}
        self._assumed: list[str] = []

    def run_all(self, node: Node | Seq, states: list[State]) -> list[State]:
        raise NotImplementedError

    def conditions(self, st: State):
        raise NotImplementedError

    def _status(self, st: State, verdict: bool | None, said: str, line: int) -> State:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------------- entry

    def simple(self, node: Simple, st: State) -> list[State]:
        words: list[Value | Assign] = []
        for w in node.words:
            words.extend([w] if isinstance(w, Assign) else self.ex.fields(w, st))
        values = [w for w in words if isinstance(w, Value)]
        if not values or not isinstance(words[0], Value):
            for a in node.assigns:
                self.assign(a, st)
            st.status = None if any("$(" in (a.value.raw if a.value else "") or "`" in (a.value.raw if a.value
                                    else "") for a in node.assigns) else 0
            return [st]
        env = {a.name: self.ex.scalar(a.value, st) if a.value else known("") for a in node.assigns
               if a.array is None}
        name = values[0]
        if not name.known or name.splits:
            self.record(node, values, st)
            st.status = None
            return [st]
        cmd = name.text
        handler = self.builtins.get(cmd)
        if handler is not None:
            return handler(self, node, words, st)
        if cmd in st.functions:
            return self.call(cmd, values, st, node.line)
        self.external(node, values, st, env)
        return [st]

    def record(self, node: Simple, values: list[Value], st: State, delegated: bool = False) -> None:
        self.script.runs_commands = True
        self.script.commands.append(Command(tuple(values), node.line, st.when, self.via, self.wrapper,
                                            self.sbatch, delegated))

    def external(self, node: Simple, values: list[Value], st: State, env: dict[str, Value]) -> None:
        """A command the reader does not run: recorded; a shell given a text (``bash -c``, a here-document) reads
        that text as a script of its own."""
        st.status = None
        k = 0
        while k < len(values) and not (values[k].known and _base(values[k].text) in SHELLS | {"sbatch"}):
            k += 1
        if k < len(values):
            child = self._child_text(node, values, k, st)
            if child is not None:
                text, args, how = child
                self.record(node, values, st, delegated=True)
                self._read_child(text, args, how, values[:k], st, env, node.line,
                                 sbatch=_base(values[k].text) == "sbatch")
                return
        self.record(node, values, st)

    def _child_text(self, node: Simple, values: list[Value], k: int,
                    st: State) -> tuple[Value, list[Value], str] | None:
        shell = _base(values[k].text)
        rest = values[k + 1:]
        if shell in SHELLS:
            j = 0
            while j < len(rest) and rest[j].known and rest[j].text.startswith(("-", "+")):
                if "c" in rest[j].text[1:] and rest[j].text.startswith("-") and j + 1 < len(rest):
                    return rest[j + 1], rest[j + 2:], f"`{shell} -c` at line {node.line}"
                j += 2 if rest[j].text in ("-o", "+o", "-O", "+O") else 1
            if j < len(rest):
                return None  # a script file: not read (it is another file)
        docs = [r for r in node.redirs if r.heredoc is not None]
        if docs and (shell in SHELLS or not any(v.known and not v.text.startswith("-") for v in rest)):
            doc = docs[-1].heredoc
            assert doc is not None
            body = self.ex.heredoc(doc.body, doc.body_line, doc.quoted, st,
                                   lambda text, line: self._lexer_word(text, line))
            return body, [], f"the here-document `{shell}` reads at line {node.line}"
        return None

    def _lexer_word(self, text: str, line: int) -> Word:
        from .lexer import Lexer
        from .parser import _command_substitution

        return Lexer(text, _command_substitution, self.depth, line).sub_word(text, line, mode="heredoc")

    def _read_child(self, text: Value, args: list[Value], how: str, wrapper: list[Value], st: State,
                    env: dict[str, Value], line: int, sbatch: bool) -> None:
        """A text another shell runs, read as its own script: it sees the exported variables only."""
        from .parser import parse

        if self.calls >= MAX_CALL_DEPTH:
            raise LimitError(line, f"scripts and functions nested deeper than {MAX_CALL_DEPTH} levels")
        markers = dict(self.ex.markers)
        pieces = []
        for chunk in text.chunks:  # an unknown stays unknown in the child: a name the child cannot set
            if chunk.why:
                marker = f"__mtk_unknown_{len(markers)}__"
                markers[marker] = chunk
                pieces.append("${" + marker + "}")
            else:
                pieces.append(chunk.text)
        program = parse("".join(pieces), self.depth, line)
        child_state = State(vars={k: v for k, v in st.vars.items() if k in st.exported}, exported=st.exported,
                            positional=tuple(args[1:]), when=st.when, args_known=True, tainted=st.tainted)
        child_state.vars.update(env)
        via = how if not self.via else f"{how}, in {self.via}"
        lines = tuple(sbatch_lines("".join(c.text for c in text.chunks))) if sbatch else self.sbatch
        runner = type(self)(self.budget, self.depth, self.script, via, (*self.wrapper, *wrapper), lines,
                            self.calls + 1, markers)
        runner.run_all(program.body, [child_state])

    # ------------------------------------------------------------------------------------------------ functions

    def call(self, name: str, values: list[Value], st: State, line: int) -> list[State]:
        if self.calls >= MAX_CALL_DEPTH:
            raise LimitError(line, f"functions call each other deeper than {MAX_CALL_DEPTH} levels")
        fn = st.functions[name]
        saved, integers, readonly, assoc = st.positional, st.integers, st.readonly, st.assoc
        st.positional = tuple(values[1:])
        st.locals = (*st.locals, {})
        self.calls += 1
        try:
            results = self.run_all(fn.body, [st])
        finally:
            self.calls -= 1
        for r in results:
            if r.flow == "return":
                r.flow = ""
            frame = r.locals[-1] if r.locals else {}
            for var, old in frame.items():
                if old is None:
                    r.vars.pop(var, None)
                else:
                    r.vars[var] = old
                r.integers = (r.integers - {var}) | ({var} & integers)  # a local's attributes end with it
                r.readonly = (r.readonly - {var}) | ({var} & readonly)
                r.assoc = (r.assoc - {var}) | ({var} & assoc)
            r.locals = r.locals[:-1]
            r.positional = saved
        return results

    # ---------------------------------------------------------------------------------------------- assignment

    def assign(self, a: Assign, st: State, export: bool = False, local: bool = False, array: bool = False,
               integer: bool = False) -> None:
        st.writable(a.name, a.line)
        if local and st.locals and a.name not in st.locals[-1]:
            st.locals[-1][a.name] = st.vars.get(a.name)
        if local:  # a local starts without the attributes of the variable it hides
            st.integers, st.assoc = st.integers - {a.name}, st.assoc - {a.name}
        if a.name in st.assoc:  # its keys are strings ($x is "x", not x's value): not read
            st.vars[a.name] = unknown(f"${a.name}", f"${a.name} (line {a.line}): an associative array is not read "
                                                    "by mtk import")
            return
        integer = integer or a.name in st.integers
        current = st.vars.get(a.name)

        def grown(old: Value | None, value: Value) -> Value:
            """The value assigned: ``+=`` appends (adds, with ``declare -i``); ``declare -i`` evaluates."""
            if not a.append or old is None:
                return self._integer(value, st, a.line) if integer else value
            if not integer:
                return self._appended(old, value, a.line)
            if not (old.known and value.known):
                return unknown(f"${a.name}", f"${a.name} (line {a.line}): += of a value not known", a.line)
            return self._integer(known(f"{old.text or 0}+({value.text})", a.line), st, a.line)
        if a.array is not None:
            elements: Array = dict(_as_array(current)) if a.append else {}
            nxt = max(elements) + 1 if elements else 0
            for word in a.array:
                keyed = re.match(r"\[([^\]]*)\]=", word.raw)
                if keyed:
                    key = self.ex.index_of(self._lexer_word(keyed.group(1), word.line), st)
                    value = self.ex.scalar(self._lexer_word(word.raw[keyed.end():], word.line), st)
                    if isinstance(key, Value):
                        st.vars[a.name] = unknown(f"${a.name}", f"${a.name}: an element's index (line {word.line}) "
                                                                "is not known")
                        return
                    elements[key], nxt = grown(None, value), key + 1
                    continue
                for value in self.ex.fields(word, st):
                    elements[nxt] = grown(None, value)
                    nxt += 1
            st.vars[a.name] = elements
        else:
            value = self.ex.scalar(a.value, st) if a.value is not None else known("", a.line)
            if a.index is not None:
                key = self.ex.index_of(a.index, st)
                if isinstance(key, Value):
                    st.vars[a.name] = unknown(f"${a.name}", f"${a.name}: an element's index (line {a.line}) is "
                                                            "not known")
                    return
                elements = dict(_as_array(current))
                elements[key] = grown(elements.get(key), value)
                st.vars[a.name] = elements
            elif isinstance(current, dict) or (array and current is None):
                elements = dict(_as_array(current))
                elements[0] = grown(elements.get(0), value)
                st.vars[a.name] = elements
            else:
                value = grown(current if isinstance(current, Value) else None, value)
                st.vars[a.name] = Value(value.chunks, value.assumed, a.line)
        if export:
            st.exported = st.exported | {a.name}

    def _appended(self, current: Value, value: Value, line: int) -> Value:
        """``X+=value``: bounded before the two are joined."""
        self.budget.spend(len(current.text) + len(value.text), line)
        return concat([current, value], line)

    def _integer(self, value: Value, st: State, line: int) -> Value:
        from . import arith

        if not value.known:
            return value
        try:
            n = arith.evaluate(value.text, lambda x: self.ex.arith_lookup(x, st, line),
                               lambda x, v: self.ex.assign_int(x, v, st, line), line)
        except arith.Unknowable as exc:
            return unknown(value.text, str(exc), line)
        return known(str(n), line)

    def make_unknown(self, names: list[str], st: State, why: str) -> None:
        for name in names:
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                st.vars[name] = unknown(f"${name}", f"${name} {why}")

    def taint(self, st: State, what: str, line: int) -> None:
        """``source``/``eval``: text the reader does not follow ran; any value may come from it."""
        said = f"`{what}` (line {line})"
        self.script.unread.append(f"line {line}: `{what}` runs text mtk import does not read; every value the "
                                  "script reads after it is unknown")
        st.tainted = said
        st.vars = {k: (unknown(f"${k}", f"${k} may be set by {said}") if k != "IFS" else v)
                   for k, v in st.vars.items()}
        st.positional = None
        st.status = None


def _as_array(value: Var | None) -> Array:
    if value is None:
        return {}
    return value if isinstance(value, dict) else {0: value}


def _base(text: str) -> str:
    return text.rsplit("/", 1)[-1]

