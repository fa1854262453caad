"""Which backends exist, by name: the built-ins' module paths and those other distributions register (entry point
group ``mtk.backends``), and the model of each one's spec block (``cluster.<name>``). Names and module paths, each
imported only when asked: the run record (:mod:`mtk.runs`) checks a record's backend here, the spec
(:mod:`mtk.spec.cluster`) finds a block's model here and the backend contract (:mod:`mtk.backends`) loads a class
from here, so none of them imports another for it (the spec stands below the contract, whose methods take a Job).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from mtk.spec.base import Section

ENTRY_POINT_GROUP = "mtk.backends"
# The one list of built-in backends (the first is the CLI's default); others come from the entry point group.
REGISTRY: dict[str, str] = {
    "local": "mtk.launcher.local:LocalBackend",
    "slurm": "mtk.slurm.backend:SlurmBackend",
    "eks": "mtk.k8s.backend:EksBackend",
}
# The built-in backends' own spec blocks (``cluster.<name>``), by model; a plugin's is its class's ``options``. Light
# modules: every spec load imports these.
OPTIONS: dict[str, str] = {
    "slurm": "mtk.slurm.options:SlurmOptions",
    "eks": "mtk.k8s.options:EksOptions",
}


@functools.cache
def registered() -> dict[str, str]:
    """The built-in backends, then those other distributions register (a built-in name cannot be taken over)."""
    from importlib.metadata import entry_points

    found = dict(REGISTRY)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def backend_names() -> list[str]:
    """Every backend ``--backend`` accepts, the default first."""
    return list(registered())


@functools.cache
def options_model(name: str) -> type[Section] | None:
    """The model of backend ``name``'s block in ``cluster`` (None: not a backend, or one without options). A
    built-in's is imported from OPTIONS; only a name that is no built-in's scans the installed distributions (and
    imports that backend's class to ask for its ``options``)."""
    from .loading import load

    if name in OPTIONS:
        return cast("type[Section]", load(OPTIONS[name]))
    if name in REGISTRY or name not in registered():
        return None
    return cast("type[Section] | None", getattr(load(registered()[name]), "options", None))
