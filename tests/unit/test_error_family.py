"""One error family (#52): every exception class the shipped package defines is a ``UserFacingError`` (bad input:
``BadInput``), which carries its exit code to the one error boundary (``mtk.failures.report``), or one of the few
internal ones listed here, which never reach a user as an expected failure and whose docstrings say so. No verb or
step maps an exception to an exit code by hand.

The classes are found by reading the source (no import: a class behind an optional library counts too), each base
resolved through the module's own imports; a cross-check against what importing the core finds keeps the reader
honest."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("mtk", "launcher", "containers", "slurm", "k8s", "data_jobs", "training")
FAMILY = "mtk.exitcodes.UserFacingError"

# The exceptions outside the family, with why each is internal. Each is either control flow that its own module
# catches (it never leaves), or the signal of a bug in mtk itself (a registry, a shipped template, device code), which
# the error boundary must show as a bug, with its traceback, rather than as one line that blames the user's input.
INTERNAL = {
    "mtk.data_jobs.sources.Restart": "control flow: a download that cannot resume starts over (getdata catches it)",
    "mtk.data_jobs.bpe_fast.FastPathMismatch": "control flow: preprocess redoes every shard with the reference",
    "mtk.data_jobs.stopping.Stopped": "control flow: a stop signal unwinding the worker pool; becomes StepStopped",
    "mtk.spec.checks.SectionInvalid": "control flow: a rule read a section that failed validation; it is skipped",
    "mtk.loading.LoadError": "a bug: a registry names a module or attribute that is not there",
    "mtk.flag_template.TemplateError": "a bug: a shipped template outside the supported subset",
    "mtk.training.strict_device.StrictDeviceError": "a bug: code that would fail on a GPU (strict CPU mode)",
    "mtk.launcher.bash_reader.arith.Unknowable": "control flow: an arithmetic value only running could tell unwinds "
                                                 "the evaluator; the bash reader makes it a named unknown",
}
# the acceptance's "a handful": a new internal exception is a decision, made here. 8: the bash reader's arithmetic
# unwinds through a recursive evaluator (its pattern matcher's work bound is a return value, no exception).
MAX_INTERNAL = 8


@dataclass
class Found:
    name: str  # module.Class
    where: str  # file:line
    bases: list[str]  # resolved: "builtins.ValueError", "mtk.x.Y", or "?<as written>" when nothing resolves it
    doc: str


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts) if rel.parts[0] == "mtk" else ["mtk", *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, tuple[str, str]]:
    """module -> (path relative to the checkout, text) for every shipped module."""
    return {_module_name(p): (p.relative_to(ROOT).as_posix(), p.read_text())
            for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))}


def _names(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Every name a module binds by import (at any depth: lazy and TYPE_CHECKING imports too) -> what it names."""
    package = module if is_package else module.rpartition(".")[0]
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                names[a.asname or a.name] = f"{base}.{a.name}"
    return names


def exception_classes(sources: dict[str, tuple[str, str]]) -> dict[str, Found]:
    """Every class in ``sources`` that derives (through any chain of the package's own classes) from a builtin
    exception, or from a base nothing resolves whose name says exception."""
    trees = {m: ast.parse(text, rel) for m, (rel, text) in sources.items()}
    classes: dict[str, tuple[str, ast.ClassDef]] = {}
    for m, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[f"{m}.{node.name}"] = (m, node)
    imports = {m: _names(tree, m, sources[m][0].endswith("__init__.py")) for m, tree in trees.items()}

    def resolve(module: str, dotted: str, depth: int = 0) -> str:
        head, _, rest = dotted.partition(".")
        if f"{module}.{head}" in classes and not rest:
            return f"{module}.{dotted}"
        target = imports[module].get(head)
        if target is None:
            return f"builtins.{head}" if not rest and isinstance(getattr(builtins, head, None), type) else f"?{dotted}"
        full = f"{target}.{rest}" if rest else target
        if full in classes:
            return full
        owner, _, attr = full.rpartition(".")
        if owner in imports and depth < 5 and "." not in attr:  # re-exported by another module of the package
            return resolve(owner, attr, depth + 1)
        return f"?{full}"

    found: dict[str, Found] = {}
    for name, (m, node) in classes.items():
        found[name] = Found(name, f"{sources[m][0]}:{node.lineno}", [resolve(m, ast.unparse(b)) for b in node.bases],
                            ast.get_docstring(node) or "")

    def roots(name: str, seen: frozenset = frozenset()) -> set[str]:
        out: set[str] = set()
        for base in found[name].bases:
            if base in found and base not in seen:
                out |= {base} | roots(base, seen | {name})
            else:
                out.add(base)
        return out

    def is_exception(base: str) -> bool:
        if base.startswith("builtins."):
            return issubclass(getattr(builtins, base.removeprefix("builtins.")), BaseException)
        return base.startswith("?") and base.rsplit(".", 1)[-1].endswith(("Error", "Exception", "Exit", "Interrupt"))

    return {n: f for n, f in found.items() if any(is_exception(r) for r in roots(n))}


def in_family(name: str, found: dict[str, Found]) -> bool:
    todo, seen = [name], set()
    while todo:
        n = todo.pop()
        if n == FAMILY:
            return True
        if n in found and n not in seen:
            seen.add(n)
            todo += found[n].bases
    return False


FOUND = exception_classes(_sources())


def test_every_exception_is_in_the_family_or_named_internal():
    outside = {n: f.where for n, f in FOUND.items() if not in_family(n, FOUND)}
    assert set(outside) == set(INTERNAL), (
        "an exception outside mtk.exitcodes.UserFacingError: make it a UserFacingError (BadInput for bad input) so "
        "the error boundary prints it as one line with its exit code, or, if no user can meet it, say why here "
        f"and in its docstring: {sorted(set(outside) - set(INTERNAL))}; listed but gone or in the family: "
        f"{sorted(set(INTERNAL) - set(outside))}")
    assert len(INTERNAL) <= MAX_INTERNAL
    assert len(FOUND) > 50  # the reader sees the package's exceptions (55 when #52 was fixed)


def test_each_internal_exception_says_so_in_its_docstring():
    unsaid = [n for n in INTERNAL if not FOUND[n].doc.startswith("Internal")]
    assert unsaid == []


def test_no_exception_base_is_left_unresolved():
    """A base the reader cannot follow would hide a class from the family check: each is the package's own class,
    a builtin, or none of them an exception (a library's class that names no error)."""
    unresolved = [f"{f.where}: {b}" for f in FOUND.values() for b in f.bases if b.startswith("?")]
    assert unresolved == []


def test_the_reader_finds_what_importing_the_core_finds():
    """The core (``mtk/``) imports cheaply: every exception class importing its modules shows, the reader found,
    with the same family membership."""
    from mtk.exitcodes import UserFacingError

    imported = {}
    for path in sorted((ROOT / "mtk").rglob("*.py")):
        name = _module_name(path)
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == name:
                imported[f"{name}.{cls.__qualname__}"] = issubclass(cls, UserFacingError)
    read = {n: in_family(n, FOUND) for n in FOUND if n.split(".")[1] not in FOLDERS}
    assert read == imported


def test_the_reader_follows_aliases_attributes_and_chains():
    code = {
        "mtk.a": ("mtk/a.py", "from mtk.exitcodes import BadInput as Bad\nclass Fine(Bad, ValueError):\n    pass\n"
                              "class Stray(KeyError):\n    pass\n"),
        "mtk.b": ("mtk/b.py", "from . import a\nimport mtk.a as alias\nclass Child(a.Stray):\n    pass\n"
                              "class Kid(alias.Fine):\n    pass\nclass Plain:\n    pass\n"),
        "mtk.exitcodes": ("mtk/exitcodes.py", "class UserFacingError(Exception):\n    pass\n"
                                              "class BadInput(UserFacingError):\n    pass\n"),
    }
    found = exception_classes(code)
    assert set(found) == {"mtk.a.Fine", "mtk.a.Stray", "mtk.b.Child", "mtk.b.Kid", "mtk.exitcodes.UserFacingError",
                          "mtk.exitcodes.BadInput"}
    assert {n for n in found if not in_family(n, found)} == {"mtk.a.Stray", "mtk.b.Child"}


# ---- no verb or step maps an exception to an exit code by hand -------------------------------------------------
def _verb_and_step_files() -> list[Path]:
    """The CLI's verbs (its boundary, launcher/cli/__init__.py, aside) and every entrypoint step's module."""
    from mtk.steps import Step

    steps = [ROOT / Path(*step.module.split(".")[1:]).with_suffix(".py") for step in Step]
    return sorted(set((ROOT / "launcher" / "cli").glob("*.py")) - {ROOT / "launcher" / "cli" / "__init__.py"}
                  | set(steps))


def _no_error(node: ast.expr | None) -> bool:
    """A handler for click's own errors (a verb adding a hint to a usage error it re-raises), or for the user's
    Ctrl-C (no error: a verb that acts on it, cancelling a followed run and saying where it saved, ends with the
    shell's 130 itself rather than the boundary's "error: interrupted")."""
    return node is not None and all("click" in ast.unparse(e) or ast.unparse(e) == "KeyboardInterrupt" for e in (
        node.elts if isinstance(node, ast.Tuple) else [node]))


EXIT_CALLS = ("sys.exit", "exit", "SystemExit", "fail")


def _looks_like_exit_code(node: ast.expr) -> bool:
    """1, exitcodes.USAGE, USAGE, exc.exit_code, or ``2 if ... else 1``."""
    if isinstance(node, ast.IfExp):
        return _looks_like_exit_code(node.body) or _looks_like_exit_code(node.orelse)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    text = ast.unparse(node)
    return isinstance(node, (ast.Attribute, ast.Name)) and (
        text.startswith("exitcodes.") or text.endswith("exit_code") or text.isupper())


def _exit_by_hand(handler: ast.ExceptHandler) -> list[str]:
    """What in an ``except`` body turns the exception into an exit code: sys.exit, SystemExit, a click error (which
    carries its own code), or a step's main returning an exit code."""
    found = []
    for node in ast.walk(handler):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func in EXIT_CALLS or (func.startswith("click.") and func.endswith(
                    ("Exception", "Error", "BadParameter", "Abort", "Exit"))):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Return) and node.value is not None and _looks_like_exit_code(node.value):
            found.append(ast.unparse(node))
    return found


def _hand_mappings(source: str, where: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and not _no_error(node.type):
            out += [f"{where}:{node.lineno}: except {ast.unparse(node.type) if node.type else ''}: {hit}"
                    for hit in _exit_by_hand(node)]
    return out


def test_no_verb_or_step_maps_an_exception_to_an_exit_code():
    found = [hit for p in _verb_and_step_files() for hit in _hand_mappings(p.read_text(), p.relative_to(ROOT))]
    assert found == [], "raise a UserFacingError (BadInput) carrying the exit code; the boundary prints it"


def test_the_mapping_check_sees_the_old_hand_mappings():
    """As they were written before #52 (build-image, convert, preprocess, train, getdata), and what stays allowed."""
    old = '''
try:
    report = run(job, opts, click.echo)
except Exception as exc:
    fail(str(exc), getattr(exc, "exit_code", 1))
try:
    convert()
except (hf.ConversionError, FileNotFoundError) as exc:
    raise click.ClickException(str(exc)) from None
try:
    preprocess()
except PreprocessError as exc:
    print(f"preprocess: error: {exc}", file=sys.stderr)
    return 1
except RendezvousError as exc:
    return exitcodes.USAGE
except FetchError as exc:
    return 2 if isinstance(exc, FetchInputError) else 1
except (KeyboardInterrupt, FetchError):
    raise SystemExit(130) from None
'''
    hits = _hand_mappings(old, "old.py")
    assert len(hits) == 6, hits  # fail(...) is a call the verbs no longer have: `fail` itself is gone
    allowed = '''
try:
    x()
except click.BadParameter as exc:
    raise click.BadParameter(f"{exc.message}{hint}") from None
except (OSError, ValueError):
    return None
except RunNotFound:
    raise BadInput("SOURCE is neither a directory nor a run") from None
except KeyboardInterrupt:
    click.echo("interrupted: cancelling the run", err=True)
    raise SystemExit(exitcodes.INTERRUPTED) from None
'''
    assert _hand_mappings(allowed, "ok.py") == []
    assert not hasattr(importlib.import_module("mtk.launcher.cli.common"), "fail")
