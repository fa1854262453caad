"""Tests by cost: each collected test gets a marker for every expensive thing it drives, so a run can pick
the cheap ones (``make test-fast`` = ``-m fast``) or one area's daemons (``-m slurm``) without any file
naming its own cost. Markers come from three places, in this order of trust:

- the fixtures a test uses (``item.fixturenames``): the Slurm test cluster, dockerd/registries, etcd pods;
- its module's source: a module that imports megatron at top level, or starts torchrun, marks every test;
- its own function body: a test that imports megatron inside (lazily) is marked alone.

A test under ``tests/integration`` is ``integration``; a test with none of the markers below is ``fast``.
"""

from __future__ import annotations

import inspect
import re
from functools import cache
from pathlib import Path

import pytest

# marker -> (description, fixtures that imply it)
COSTS: dict[str, tuple[str, frozenset[str]]] = {
    "slurm": ("drives the real Slurm test cluster (tests/support/minicluster.py)",
              frozenset({"slurm_cluster", "harness", "module_harness", "mtk_venv", "stub_venv"})),
    "docker": ("drives a real dockerd or a container registry",
               frozenset({"dockerd", "base_image", "registry", "ecr_registry", "moto_ecr"})),
    "etcd": ("starts a real etcd", frozenset({"pod_net_factory", "pod_net"})),
    "torchrun": ("starts torchrun / multi-process training", frozenset({"tr", "indexed_corpus", "engine_root"})),
    "fuzz": ("property-based fuzzing with hypothesis (minutes)", frozenset()),
    "megatron": ("imports megatron-core (seconds of import, torch)", frozenset({"megatron_indexed", "megatron_write"})),
    "workers": ("starts several worker processes at once (multi-process preprocess)", frozenset()),
}
HEAVY = (*COSTS, "integration")

# an import of megatron in the test, or in the code a test hands to a child Python (``"...\\nfrom megatron.core ..."``)
_MEGATRON = re.compile(r"""(?:^\s*|\\n|["'])(?:import|from)\s+megatron\b""", re.M)
_MEGATRON_TOP = re.compile(r"^(?:import|from)\s+megatron\b", re.M)
# starting torchrun (not rendering its argv): the Megatron-LM runner, or ``-m torch.distributed.run`` in argv
_TORCHRUN = re.compile(r"""\bmegatron_lm_run\b|["']-m["']\s*,\s*["']torch\.distributed\.run["']""")
_ETCD = re.compile(r"""["']etcd["']\s*,\s*["']--""")


def configure(config: pytest.Config) -> None:
    for name, (what, _) in COSTS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    config.addinivalue_line("markers", "fast: pure logic, none of the above (make test-fast)")


@cache
def _module_costs(path: Path) -> frozenset[str]:
    try:
        text = path.read_text()
    except OSError:
        return frozenset()
    found = set()
    if _MEGATRON_TOP.search(text):
        found.add("megatron")
    if _TORCHRUN.search(text):
        found.add("torchrun")
    if _ETCD.search(text):
        found.add("etcd")
    return frozenset(found)


def _function_costs(item: pytest.Item) -> set[str]:
    fn = getattr(item, "function", None)
    if fn is None:
        return set()
    found = {"fuzz"} if getattr(fn, "is_hypothesis_test", False) else set()  # decorated with hypothesis' @given
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return found
    return found | ({"megatron"} if _MEGATRON.search(src) else set())


def costs(item: pytest.Item, tests_root: Path) -> set[str]:
    """The cost markers ``item`` earns (without ``fast``)."""
    names = set(getattr(item, "fixturenames", ()))
    found = {m for m, (_, fixtures) in COSTS.items() if names & fixtures}
    path = Path(str(item.path))
    found |= _module_costs(path) | _function_costs(item)
    if (tests_root / "integration") in path.parents:
        found.add("integration")
    found |= {m.name for m in item.iter_markers() if m.name in HEAVY}
    return found


def mark(items: list[pytest.Item], tests_root: Path) -> None:
    for item in items:
        found = costs(item, tests_root)
        for name in sorted(found - {m.name for m in item.iter_markers()}):
            item.add_marker(name)
        if not found:
            item.add_marker("fast")
