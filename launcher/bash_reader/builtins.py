"""The builtins that change what the reader knows: each takes (runner, command, its words, state) and gives the
states after it. ``source``/``.``/``eval`` are not followed (:meth:`CommandRunner.taint`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import BashReadError
from .nodes import Assign, Simple
from .state import State
from .values import Value, known, unknown

if TYPE_CHECKING:
    from .commands import CommandRunner

Words = list["Value | Assign"]
Handler = Callable[["CommandRunner", Simple, Words, State], list[State]]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
SCOPED = "local"  # bash's builtin for a function's own variables


def _values(words: Words) -> list[Value]:
    return [w for w in words if isinstance(w, Value)]


def _ok(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    st.status = 0
    return [st]


def _false(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    st.status = 1
    return [st]


def _declare(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    """declare/typeset/local/export/readonly: options, then names and assignments; ``-i`` (an assignment evaluates
    as arithmetic) and ``-r`` (readonly) are kept with the name, ``+i`` drops it."""
    cmd = _values(words)[0].text
    opts = off = ""
    rest = words[1:]
    while rest and isinstance(rest[0], Value) and rest[0].known and re.fullmatch(r"[-+][a-zA-Z]+", rest[0].text):
        if rest[0].text.startswith("-"):
            opts += rest[0].text[1:]
        else:
            off += rest[0].text[1:]
        rest = rest[1:]
    if "f" in opts or "F" in opts or "p" in opts:
        st.status = 0
        return [st]
    if "n" in opts:
        named = " ".join(w.name if isinstance(w, Assign) else w.text for w in rest)
        raise BashReadError(node.line, f"{cmd} -n {named}: a name reference (a variable that stands for another) is "
                                       "not read by mtk import; use the other variable's own name")
    # in a function, declare and typeset make its own variables too (unless -g), as local does
    export = cmd == "export" or "x" in opts
    local = cmd == SCOPED or (cmd in ("declare", "typeset") and bool(st.locals) and "g" not in opts)
    readonly = cmd == "readonly" or "r" in opts
    for item in rest:
        if isinstance(item, Assign):
            name = item.name
            if "A" in opts:
                st.assoc = st.assoc | {name}
                runner.assign(item, st, export=export, local=local)  # not read: every element is unknown
            else:
                runner.assign(item, st, export=export, local=local, array="a" in opts, integer="i" in opts)
            _attributes(st, name, opts, off, readonly)
            continue
        if not item.known:
            continue
        name = item.text.split("=", 1)[0]
        if not _NAME.match(name):
            continue
        if "=" in item.text:  # an assignment that came out of an expansion: `export "$X=1"` (rare)
            st.writable(name, node.line)
            st.vars[name] = Value(known(item.text.split("=", 1)[1]).chunks, item.assumed, node.line)
        if local and st.locals and name not in st.locals[-1]:
            st.writable(name, node.line)
            st.locals[-1][name] = st.vars.get(name)
            st.vars.pop(name, None)
            st.integers, st.assoc = st.integers - {name}, st.assoc - {name}
        if "A" in opts:
            st.assoc = st.assoc | {name}
            st.vars[name] = unknown(f"${name}", f"${name} (line {node.line}): an associative array is not read by "
                                                "mtk import")
        if "a" in opts and name not in st.vars:
            st.vars[name] = {}
        if export:
            st.exported = st.exported | {name}
        _attributes(st, name, opts, off, readonly)
    st.status = 0
    return [st]


def _attributes(st: State, name: str, opts: str, off: str, readonly: bool) -> None:
    if "i" in opts:
        st.integers = st.integers | {name}
    if "i" in off:
        st.integers = st.integers - {name}
    if readonly:
        st.readonly = st.readonly | {name}


def _unset(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    values = _values(words)[1:]
    functions = bool(values) and values[0].text == "-f"
    for v in values:
        if v.known and not v.text.startswith("-"):
            name = re.sub(r"\[.*\]$", "", v.text)
            if functions:
                st.functions.pop(name, None)
            elif name != v.text:
                runner.make_unknown([name], st, f"(line {node.line}): an element unset with an index")
            elif name in st.readonly:  # bash: "cannot unset: readonly variable", and goes on
                st.status = 1
                return [st]
            else:
                st.vars.pop(name, None)
                st.integers, st.assoc = st.integers - {name}, st.assoc - {name}
    st.status = 0
    return [st]


def _set(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    values = _values(words)[1:]
    k = 0
    while k < len(values) and values[k].known and values[k].text[:1] in "-+" and values[k].text != "--":
        flag = values[k].text
        named = re.fullmatch(r"[-+][a-zA-Z]*o", flag)  # -o / -euo take an option name
        if "e" in flag[1:] or (named and k + 1 < len(values) and values[k + 1].text == "errexit"):
            st.errexit = flag.startswith("-")
        k += 2 if named else 1
    if k < len(values) and values[k].text == "--":
        k += 1
        st.positional = tuple(values[k:])
    elif k < len(values):
        st.positional = tuple(values[k:])
    st.status = 0
    return [st]


def _shift(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    values = _values(words)[1:]
    n = int(values[0].text) if values and values[0].known and values[0].text.isdigit() else (None if values else 1)
    if st.positional is None or n is None:
        st.positional = None
        st.status = None
    elif n > len(st.positional):
        st.status = 1
    else:
        st.positional = st.positional[n:]
        st.status = 0
    return [st]


def _source(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    runner.taint(st, " ".join(w.raw for w in node.words if not isinstance(w, Assign)), node.line)
    return [st]


def _read_vars(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    """read / mapfile / readarray / getopts / printf -v: the named variables get what only running could tell."""
    values = _values(words)
    cmd = values[0].text
    names: list[str] = []
    if cmd == "printf":
        if len(values) > 2 and values[1].text == "-v":
            names = [values[2].text]
        else:
            st.status = 0
            return [st]
    elif cmd == "getopts":
        names = [values[2].text] if len(values) > 2 else []
        names.append("OPTARG")
    else:
        args = [v.text for v in values[1:] if v.known]
        skip_next = {"-d", "-n", "-N", "-p", "-t", "-u", "-C", "-c", "-O", "-s", "-i", "-a"}
        i = 0
        while i < len(args):
            if args[i] in skip_next:
                if args[i] == "-a" and i + 1 < len(args):
                    names.append(args[i + 1])
                i += 2
            elif args[i].startswith("-"):
                i += 1
            else:
                names.append(args[i])
                i += 1
        if not names:
            names = ["MAPFILE" if cmd in ("mapfile", "readarray") else "REPLY"]
    runner.make_unknown(names, st, f"is read by `{cmd}` at line {node.line}: only running can tell")
    st.status = None
    return [st]


def _flow(kind: str) -> Handler:
    def handler(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
        values = _values(words)[1:]
        if kind == "exit":
            runner.script.exits.append(f"`{' '.join(v.text for v in _values(words))}` at line {node.line} ends it"
                                       + (f" when {'; '.join(st.when)}" if st.when else ""))
        if kind in ("exit", "return"):
            st.status = int(values[0].text) & 255 if values and values[0].known and values[0].text.isdigit() \
                else (None if values else st.status)
        st.flow = kind
        return [st]
    return handler


def _exec(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    values = _values(words)
    if len(values) > 1:
        runner.external(node, values, st, {})
        st.flow = "exit"  # exec replaces the shell: nothing after it runs
    else:
        st.status = 0
    return [st]


def _test(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    values = _values(words)
    args = values[1:]
    if values[0].text == "[":
        if not args or args[-1].text != "]":
            st.status = 2
            return [st]
        args = args[:-1]
    for a in args:
        runner._assumed.extend(a.assumed)
    said = " ".join(w.raw for w in node.words if not isinstance(w, Assign))
    return [runner._status(st, runner.conditions(st).single(args, node.line), said, node.line)]


def _let(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    from . import arith

    status: int | None = 1
    for v in _values(words)[1:]:
        if not v.known:
            status = None
            continue
        try:
            n = arith.evaluate(v.text, lambda x: runner.ex.arith_lookup(x, st, node.line),
                               lambda x, val: runner.ex.assign_int(x, val, st, node.line), node.line)
            status = 0 if n else 1
        except arith.Unknowable:
            status = None
    st.status = status
    return [st]


# shell options that change nothing a non-interactive script's reading depends on; any other (extglob, nullglob,
# expand_aliases — which makes ``alias`` take effect —, nocasematch, globstar, ...) changes how later lines read
_HARMLESS_SHOPT = frozenset({"checkwinsize", "histappend", "cmdhist", "lithist", "progcomp", "promptvars",
                             "hostcomplete", "huponexit", "mailwarn", "sourcepath", "checkhash", "checkjobs"})


def _shopt(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    """``shopt -s/-u NAME``: harmless options are fine; one that changes how bash reads or runs what follows
    (patterns, globbing, aliases) is refused with its line — the lines after it would be read otherwise than bash
    reads them; a query's status only running could tell."""
    values = _values(words)
    args = [v.text if v.known else None for v in values[1:]]
    setting = bool(args) and args[0] in ("-s", "-u")
    names = args[1:] if setting else []
    if setting and names and all(n in _HARMLESS_SHOPT for n in names):
        st.status = 0
    elif setting:
        said = " ".join(w.raw for w in node.words if not isinstance(w, Assign))
        raise BashReadError(node.line, f"`{said}` changes how bash reads or runs the lines after it (patterns, "
                                       "globbing, aliases), which mtk import does not follow: remove it, or give "
                                       "the training flags as a plain argument list")
    else:
        st.status = None
    return [st]


def _eval(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    return _source(runner, node, words, st)


def _unknown_status(runner: CommandRunner, node: Simple, words: Words, st: State) -> list[State]:
    st.status = None
    return [st]


BUILTINS: dict[str, Handler] = {
    ":": _ok, "true": _ok, "false": _false, "echo": _ok, "trap": _ok, "shopt": _shopt, "umask": _ok, "alias": _ok,
    "export": _declare, "declare": _declare, "typeset": _declare, "local": _declare, "readonly": _declare,
    "unset": _unset, "set": _set, "shift": _shift, "source": _source, ".": _source, "eval": _eval,
    "read": _read_vars, "mapfile": _read_vars, "readarray": _read_vars, "getopts": _read_vars,
    "printf": _read_vars, "exit": _flow("exit"), "return": _flow("return"), "break": _flow("break"),
    "continue": _flow("continue"), "exec": _exec, "test": _test, "[": _test, "let": _let, "cd": _unknown_status,
    "pushd": _unknown_status, "popd": _unknown_status, "wait": _unknown_status,
}
