"""Which backends exist, by name: the built-ins' module paths and those other distributions register (entry point
group ``mtk.backends``). Names and module paths only, nothing imported: the run record (:mod:`mtk.runs`) checks a
record's backend here and the backend contract (:mod:`mtk.backends`) loads a class from here, so neither imports
the other for it.
"""

from __future__ import annotations

import functools

ENTRY_POINT_GROUP = "mtk.backends"
# The one list of built-in backends (the first is the CLI's default); others come from the entry point group.
REGISTRY: dict[str, str] = {
    "local": "mtk.launcher.local:LocalBackend",
    "slurm": "mtk.slurm.backend:SlurmBackend",
    "eks": "mtk.k8s.backend:EksBackend",
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
