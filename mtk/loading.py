"""The one loader of the registries that name code as ``"package.module:attr"`` (the CLI's verbs, the entrypoint's
steps, the backends): the module is imported only when the name is loaded. Imports nothing above the core."""

from __future__ import annotations

import importlib


class LoadError(ImportError):
    """Internal: a registry names a module or attribute that does not exist — a registration's mistake (mtk's or a
    plugin's), not the user's, so the error boundary shows it as a bug with its traceback."""


def load(target: str, default: str | None = None) -> object:
    """The object ``target`` names: ``"package.module:attr"`` (``attr`` may be dotted), or ``"package.module"``
    and then its attribute ``default`` (the module itself when ``default`` is None).

    A module or attribute that is not there raises :class:`LoadError` naming ``target``; a library missing *inside*
    the module (``ModuleNotFoundError`` for another name) is raised as is, so the error boundary can name the extra
    that installs it."""
    module_name, _, attr = target.partition(":")
    attr = attr or default or ""
    if not module_name or (":" in target and not attr):
        raise LoadError(f"cannot load {target!r}: expected 'package.module:attribute'")
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise
        raise LoadError(f"cannot load {target!r}: no module named {exc.name!r}") from exc
    for part in filter(None, attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LoadError(f"cannot load {target!r}: {module_name} has no attribute {attr!r}") from None
    return obj
