"""Following a parsed script without running it: every way its conditions allow, one :class:`~.state.State` per
way (:mod:`.state`), and every command recorded with the words bash would pass it (:mod:`.commands` handles simple
commands and builtins). Loops run while their conditions are known; a loop whose end only running could tell is
followed twice and then widened (what it changes becomes unknown)."""

from __future__ import annotations

from dataclasses import replace

from . import arith
from .builtins import BUILTINS
from .commands import CommandRunner
from .conditions import Conditions, arithmetic_integer
from .errors import BashReadError, LimitError
from .nodes import (
    AndOr,
    ArithCmd,
    ArithFor,
    Case,
    Cond,
    For,
    FunctionDef,
    Group,
    If,
    Loop,
    Node,
    Pipeline,
    Redirected,
    Seq,
    Simple,
    Word,
)
from .state import State, prune
from .values import Chunk, Value

MAX_TURNS = 1000  # turns of one loop whose condition the script decides
UNDECIDED_TURNS = 2  # turns followed of a loop whose end only running could tell, before widening


def describe(node: Node | Seq | None) -> str:
    """A short quote of a command as written (for conditions)."""
    text = _describe(node)
    one = " ".join(text.split())
    return one if len(one) <= 80 else one[:77] + "..."


def _describe(node: Node | Seq | None) -> str:
    if node is None:
        return ""
    if isinstance(node, Seq):
        return "; ".join(_describe(n) for n, _ in node.items)
    if isinstance(node, Simple):
        assigns = [f"{a.name}={a.value.raw if a.value else '(...)'}" for a in node.assigns]
        return " ".join([*assigns, *(w.raw if isinstance(w, Word) else w.name + "=..." for w in node.words)])
    if isinstance(node, Cond):
        return "[[ " + " ".join(i if isinstance(i, str) else i.raw for i in node.items) + " ]]"
    if isinstance(node, AndOr):
        return _describe(node.first) + "".join(f" {op} {_describe(n)}" for op, n in node.rest)
    if isinstance(node, Pipeline):
        return ("! " if node.negate else "") + " | ".join(_describe(n) for n in node.commands)
    if isinstance(node, ArithCmd):
        return f"(({node.expr.raw}))"
    return type(node).__name__.lower()


class Runner(CommandRunner):
    builtins = BUILTINS
    testing = 0  # inside a condition (an if/while test, a && list's left side): set -e does not end the script

    def run_all(self, node: Node | Seq, states: list[State]) -> list[State]:
        out: list[State] = []
        for st in states:
            out.extend([st] if st.flow else self.run(node, st))
        return out if len(out) == 1 and out[0].flow != "exit" else prune(out)

    def run(self, node: Node | Seq, st: State) -> list[State]:
        if isinstance(node, Seq):
            return self._seq(node, st)
        self.budget.step(node.line)
        if isinstance(node, (Simple, Pipeline, Cond, ArithCmd)) or (isinstance(node, Group) and node.subshell):
            return self._errexit(self._command(node, st), node)
        if isinstance(node, AndOr):
            return self._and_or(node, st)
        return self._command(node, st)

    def _command(self, node: Node, st: State) -> list[State]:
        if isinstance(node, Simple):
            return self.simple(node, st)
        if isinstance(node, Pipeline):
            return self._pipeline(node, st)
        if isinstance(node, If):
            return self._if(node, st)
        if isinstance(node, Loop):
            return self._while(node, st)
        if isinstance(node, For):
            return self._for(node, st)
        if isinstance(node, ArithFor):
            return self._arith_for(node, st)
        if isinstance(node, Case):
            return self._case(node, st)
        if isinstance(node, Group):
            if node.subshell:
                return [self._subshell(node.body, st)]
            return self.run_all(node.body, [st])
        if isinstance(node, Cond):
            return [self._status(st, self.conditions(st).double(node.items, node.line), describe(node),
                                 node.line)]
        if isinstance(node, ArithCmd):
            return [self._arith_status(node, st)]
        if isinstance(node, FunctionDef):
            st.functions[node.name] = node
            st.status = 0
            return [st]
        if isinstance(node, Redirected):
            return self.run(node.node, st)
        raise AssertionError(type(node))

    def _errexit(self, states: list[State], node: Node) -> list[State]:
        """``set -e``: a command that fails outside a condition (an ``if``/``while`` test, all but the last of an
        ``&&``/``||`` list, a ``!`` pipeline) ends the script. Where only running can tell the status, the way goes
        on, as it does without ``set -e``."""
        for s in states:
            if s.errexit and not self.testing and not s.flow and s.status not in (0, None) and \
                    not (isinstance(node, Pipeline) and node.negate):
                s.flow = "exit"
                self.script.exits.append(f"`{describe(node)}` at line {node.line} fails (status {s.status}) and "
                                         "`set -e` ends it")
        return states

    def _testing(self, node: Node | Seq, states: list[State]) -> list[State]:
        """``node`` run as a condition: ``set -e`` does not end the script there."""
        self.testing += 1
        try:
            return self.run_all(node, states)
        finally:
            self.testing -= 1

    # ------------------------------------------------------------------------------------------------ lists

    def _seq(self, node: Seq, st: State) -> list[State]:
        states = [st]
        for item, background in node.items:
            if background:
                for s in states:
                    if not s.flow:
                        self._subshell(item, s)
                        s.status = 0
                continue
            states = self.run_all(item, states)
        return states

    def _and_or(self, node: AndOr, st: State) -> list[State]:
        states = self._testing(node.first, [st])
        prev: Node = node.first
        for k, (op, item) in enumerate(node.rest):
            last = k == len(node.rest) - 1
            run = self.run if last else lambda n, s: self._testing(n, [s])
            nxt: list[State] = []
            for s in states:
                if s.flow:
                    nxt.append(s)
                elif s.status is None:
                    said = f"`{describe(prev)}` (line {prev.line})"
                    nxt.append(s.fork(f"{said} {'fails' if op == '&&' else 'succeeds'}"))
                    nxt.extend(run(item, s.fork(f"{said} {'succeeds' if op == '&&' else 'fails'}")))
                elif (s.status == 0) == (op == "&&"):
                    nxt.extend(run(item, s))
                else:
                    nxt.append(s)
            states, prev = prune(nxt), item
        return states

    def _pipeline(self, node: Pipeline, st: State) -> list[State]:
        status: int | None = 0
        self.testing += 1  # each part runs in a subshell: its variables do not come back, nor does its set -e
        try:
            for item in node.commands:
                status = self._subshell(item, st).status
        finally:
            self.testing -= 1
        st.status = status if not node.negate or status is None else int(status == 0)
        return [st]

    def _subshell(self, node: Node | Seq, st: State) -> State:
        results = self.run_all(node, [st.copy()])
        statuses = {r.status for r in results}
        st.status = statuses.pop() if len(statuses) == 1 else None
        return st

    # ---------------------------------------------------------------------------------------------- conditions

    def conditions(self, st: State) -> Conditions:
        ex = self.ex

        def integer(text: str) -> int:
            return arith.evaluate(text, lambda n: ex.arith_lookup(n, st, 0), lambda n, v: ex.assign_int(n, v, st, 0),
                                  0)

        def is_set(name: str) -> bool | None:
            return True if name in st.vars else (None if st.tainted else False)

        return Conditions(lambda w: self._noted(ex.scalar(w, st)), lambda w: ex.pattern(w, st),
                          arithmetic_integer(integer), is_set)

    def _noted(self, value: Value) -> Value:
        self._assumed.extend(value.assumed)
        return value

    def _status(self, st: State, verdict: bool | None, said: str, line: int) -> State:
        """A test's verdict as an exit status; a verdict reached through an assumed default is noted."""
        if verdict is not None and self._assumed:
            self.script.notes.append(f"`{said}` (line {line}) read as {str(verdict).lower()}: "
                                     + "; ".join(dict.fromkeys(self._assumed)))
        self._assumed.clear()
        st.status = None if verdict is None else (0 if verdict else 1)
        return st

    def _arith_status(self, node: ArithCmd, st: State) -> State:
        text = self.ex.scalar(node.expr, st)
        try:
            if not text.known:
                raise arith.Unknowable("; ".join(text.unknown))
            n = arith.evaluate(text.text, lambda name: self.ex.arith_lookup(name, st, node.line),
                               lambda name, v: self.ex.assign_int(name, v, st, node.line), node.line)
            st.status = 0 if n else 1
        except arith.Unknowable:
            st.status = None
        return st

    def _if(self, node: If, st: State) -> list[State]:
        pending, done = [st], []
        for cond, body in node.clauses:
            nxt: list[State] = []
            said = f"`{describe(cond)}` (line {cond.line})"
            for r in self._testing(cond, pending):
                if r.flow:
                    done.append(r)
                elif r.status == 0:
                    done.extend(self.run_all(body, [r]))
                elif r.status is not None:
                    nxt.append(r)
                else:
                    done.extend(self.run_all(body, [r.fork(f"{said} is true")]))
                    nxt.append(r.fork(f"{said} is false"))
            pending = nxt
        if node.orelse is not None:
            done.extend(self.run_all(node.orelse, pending))
        else:
            for p in pending:
                p.status = 0
            done.extend(pending)
        return prune(done)

    def _case(self, node: Case, st: State) -> list[State]:
        subject = self.ex.scalar(node.subject, st)
        pending, done = [st], list[State]()
        falling: list[State] = []
        for patterns, body, end in node.clauses:
            entering: list[State] = list(falling)
            nxt: list[State] = []
            for s in pending:
                verdict = self._matches(subject, patterns, s)
                said = f"`case {node.subject.raw}` (line {node.line}) matches {'|'.join(p.raw for p in patterns)}"
                if verdict is True:
                    entering.append(s)
                elif verdict is False:
                    nxt.append(s)
                else:
                    entering.append(s.fork(said))
                    nxt.append(s.fork(said.replace(" matches ", " does not match ")))
            ran = self.run_all(body, entering)
            falling = [r for r in ran if not r.flow] if end == ";&" else []
            done.extend(r for r in ran if r.flow or end == ";;")
            pending = nxt + ([r for r in ran if not r.flow] if end == ";;&" else [])
        for p in pending:
            p.status = 0
        return prune(done + falling + pending)

    def _matches(self, subject: Value, patterns: tuple[Word, ...], st: State) -> bool | None:
        from . import patterns as globs

        undecided = False
        for word in patterns:
            pat = self.ex.pattern(word, st)
            if isinstance(pat, Value):
                undecided = True
                continue
            if pat == [("*", False)]:
                return True
            if not subject.known:
                undecided = True
            else:
                found = globs.matches(pat, subject.text)
                if found:
                    return True
                undecided = undecided or found is None
        return None if undecided else False

    # ---------------------------------------------------------------------------------------------------- loops

    def _while(self, node: Loop, st: State) -> list[State]:
        before, states, done = st.copy(), [st], list[State]()
        undecided = turns = 0
        said = f"`{describe(node.cond)}` (line {node.cond.line})"
        while states:
            turns += 1
            if turns > MAX_TURNS:  # a loop the script never leaves: nothing after it runs
                self.script.exits.append(f"the loop at line {node.line} never ends (the script stays in it)")
                return prune(done)
            going: list[State] = []
            for s in self._testing(node.cond, states):
                ok = None if s.status is None else (s.status == 0) != node.until
                if s.flow or ok is False:
                    s.status = 0
                    done.append(s)
                elif ok:
                    going.append(s)
                elif undecided >= UNDECIDED_TURNS:
                    done.append(self._widen(s, before, node.line))
                else:
                    done.append(s.fork(f"{said} ends the loop"))
                    going.append(s.fork(f"{said} runs the loop"))
            undecided += any(s.status is None for s in going) or len(going) > 1
            states = self._turn(node.body, going, done)
        return prune(done)

    def _turn(self, body: Seq, going: list[State], done: list[State]) -> list[State]:
        """One turn of a loop body: the ways that go round again (``break`` and ``return`` leave)."""
        again = []
        for s in self.run_all(body, going):
            if s.flow == "break":
                done.append(replace(s, flow=""))
            elif s.flow == "continue":
                again.append(replace(s, flow=""))
            elif s.flow:
                done.append(s)
            else:
                again.append(s)
        return again

    def _widen(self, st: State, before: State, line: int) -> State:
        """Leave a loop whose turns only running could tell: what it changed is unknown."""
        why = f"set in the loop at line {line}, whose number of turns only running can tell"
        if (st.integers, st.readonly) != (before.integers, before.readonly):
            raise BashReadError(line, f"a declare -i or -r {why.removeprefix('set ')}: not read by mtk import "
                                      "(declare it before the loop)")
        for name in set(st.vars) | set(before.vars):
            if st.vars.get(name) != before.vars.get(name):
                st.vars[name] = Value((Chunk(f"${name}", f"${name} is {why}"),))
        if st.positional != before.positional:
            st.positional = None
        st.status = None
        return st

    def _for(self, node: For, st: State) -> list[State]:
        st.writable(node.name, node.line)
        before = st.copy()
        if node.words is None:
            items = list(st.positional) if st.positional is not None else None
        else:
            items = [v for w in node.words for v in self.ex.fields(w, st)]
        if node.select or items is None or any(not v.known or v.splits for v in items):
            st.vars[node.name] = Value((Chunk(f"${node.name}", f"${node.name} (line {node.line}) takes values "
                                                               "only running can tell"),))
            done: list[State] = []
            again = self._turn(node.body, [st], done)
            return prune([*done, *(self._widen(s, before, node.line) for s in again)])
        states, done = [st], []
        for item in items:
            for s in states:  # declare -i: each item evaluated as arithmetic
                s.vars[node.name] = self._integer(item, s, node.line) if node.name in s.integers else item
            states = self._turn(node.body, states, done)
            if not states:
                break
        return prune(done + states)

    def _arith_for(self, node: ArithFor, st: State) -> list[State]:
        parts = node.raw.split(";")
        if len(parts) != 3:
            st.status = None
            return [st]
        init, cond, step = parts
        before, states, done = st.copy(), [st], []
        for s in states:
            self._eval_quietly(init, s, node.line)
        for _ in range(MAX_TURNS):
            going = []
            for s in states:
                verdict = self._eval_quietly(cond, s, node.line) if cond.strip() else 1
                if verdict is None:
                    done.append(self._widen(s, before, node.line))
                elif verdict:
                    going.append(s)
                else:
                    done.append(s)
            states = self._turn(node.body, going, done)
            for s in states:
                self._eval_quietly(step, s, node.line)
            if not states:
                return prune(done)
        raise LimitError(node.line, f"the loop runs more than {MAX_TURNS} turns")

    def _eval_quietly(self, text: str, st: State, line: int) -> int | None:
        try:
            return arith.evaluate(text, lambda n: self.ex.arith_lookup(n, st, line),
                                  lambda n, v: self.ex.assign_int(n, v, st, line), line)
        except arith.Unknowable:
            return None
