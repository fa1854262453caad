"""An import judged as ``mtk import`` judges it: the flags refused (including a derived flag the validated spec
computes differently), those the user allowed to drop, and whether the spec validates. The verb and the corpus run
(``scripts/megatron_import_corpus.py``) share it, so the table they print is what users get."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import import_text
from .flags import Imported, agreement


@dataclass
class Verdict:
    imported: Imported
    job: Any = None  # the validated spec (None when it does not validate)
    problems: str = ""  # validate's message when it does not
    dropped: list[tuple[str, str]] = field(default_factory=list)  # refused, but the user allowed each
    blocking: list[tuple[str, str]] = field(default_factory=list)  # refused and not allowed: exit 2

    @property
    def ok(self) -> bool:
        return not self.blocking and not self.problems


def allowed(key: str, allow: set[str]) -> bool:
    """``--allow-dropped --foo`` allows ``--foo`` however it was given (``--foo 3``, ``torchrun --foo``)."""
    return key in allow or key.split(" ")[0] in allow or any(part in allow for part in key.split(" "))


def judge(text: str, source: str, name: str | None = None, args: list[str] | None = None,
          allow: set[str] | frozenset[str] = frozenset(), backend: str | None = None) -> Verdict:
    """Import ``text`` and validate the spec; raises :class:`~mtk.exitcodes.BadInput` when there is nothing to
    import (a syntax error, a limit, another entry point)."""
    from mtk.backends import infer_backend
    from mtk.spec.errors import SpecError
    from mtk.spec.loader import validate

    imported = import_text(text, name=name, source=source, args=args)
    verdict = Verdict(imported)
    if backend is None:
        backend, why = infer_backend(imported.spec.get("cluster"), source)
        if not why and (imported.spec.get("cluster", {}).get("nodes") or 1) > 1:
            backend = None  # several nodes and no scheduler's block: which backend runs it is the launch's choice
            imported.notes.append(f"validated for no backend in particular: {imported.spec['cluster']['nodes']} "
                                  "nodes need `mtk launch --backend slurm` or `--backend eks`")
    try:
        verdict.job = validate(imported.spec, backend=backend)
    except SpecError as exc:
        verdict.problems = str(exc)
    if verdict.job is not None:
        imported.refused += agreement(imported, verdict.job)
    for entry in imported.refused:
        (verdict.dropped if allowed(entry[0], set(allow)) else verdict.blocking).append(entry)
    return verdict
