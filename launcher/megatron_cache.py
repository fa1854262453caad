"""The megatron-core check's verdicts, kept in the user's cache dir so a repeated ``validate``/``launch`` of the
same model skips the child process (importing megatron.core is most of its ~8 s).

An entry is keyed on exactly what the check reads and nothing else (see :func:`spec_material`): the model,
parallel sections, the vocabulary the model is built with (the tokenizer's, which the spec's model section does not
hold), the train fields the LR scheduler / config / device plan use (each marked where it is declared,
``mtk.spec.train.READ_BY_CHECK``), the cluster's device and world size. Paths, ``cluster.slurm.*``, the run name,
data (but for that vocabulary), image and resilience settings are not read by the check, so changing them keeps
the verdict. The environment
joins the key: the versions of mtk, megatron-core, torch (and Transformer Engine / Apex where present), the Python
version, and the size and mtime of mtk's own source files (a source checkout changes without a version bump). Only
the standard library and mtk's core here: it runs in the CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtk.files import atomic_write, cache_root
from mtk.spec.train import read_by_check

if TYPE_CHECKING:
    from mtk.spec import Job

SCHEMA = 2  # bump when an entry's layout or the key's meaning changes
# Distributions whose code the check runs (missing ones count as None).
DISTRIBUTIONS = ("mtk", "megatron-core", "torch", "transformer-engine", "apex")


def cache_dir() -> Path:
    """The check's verdicts: ``<cache_root>/megatron-check``."""
    return cache_root() / "megatron-check"


def spec_material(job: Job, vocab_size: int) -> dict[str, Any]:
    """The parts of ``job`` the check's verdict depends on, as plain JSON data, and the vocabulary the model is built
    with (``vocab_size``: the tokenizer's, :func:`mtk.vocabulary.built`; not in the spec's model section)."""
    train = job.train.model_dump(mode="json", include=set(read_by_check()))
    return {"model": job.model.model_dump(mode="json"), "parallel": job.parallel.model_dump(mode="json"),
            "train": train, "cluster": {"device": job.cluster.device, "world_size": job.cluster.world_size},
            "vocab_size": vocab_size}


def _source_stamp() -> str:
    """Size and mtime of every .py file of mtk.launcher and mtk.training: an edit to the check, the engine or
    the spec (a source checkout keeps its version number) gives a new stamp."""
    import mtk.launcher as launcher

    roots = [Path(launcher.__file__).parent]
    from importlib.util import find_spec

    training = find_spec("mtk.training")
    if training is not None and training.submodule_search_locations:
        roots += [Path(p) for p in training.submodule_search_locations]
    digest = hashlib.sha256()
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def installed_versions() -> dict[str, str | None]:
    """The version of each of ``DISTRIBUTIONS`` on ``sys.path``, from its ``NAME-VERSION.dist-info`` (or
    ``.egg-info``) directory name, the first found winning as it does for imports: what ``importlib.metadata.version``
    says, without opening and parsing each distribution's METADATA on every CLI call."""
    wanted = {_normalise(d): d for d in DISTRIBUTIONS}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            stem, dot, suffix = name.rpartition(".")
            if not dot or suffix not in ("dist-info", "egg-info"):
                continue
            dist, _, version = stem.partition("-")
            wanted_name = wanted.get(_normalise(dist))
            if wanted_name and version and wanted_name not in found:
                found[wanted_name] = version.split("-")[0] if suffix == "egg-info" else version
    return {d: found.get(d) for d in DISTRIBUTIONS}


def _normalise(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def environment() -> dict[str, Any]:
    """Versions of what the check runs, read from the installed distributions' directory names (no torch
    import, no importlib.metadata)."""
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return {"versions": installed_versions(), "python": python, "mtk_source": _source_stamp()}


def key_material(job: Job, env: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    return {"schema": SCHEMA, "spec": spec_material(job, vocab_size), "environment": env}


def key(material: dict[str, Any]) -> str:
    """The entry's name: sha256 of the canonical JSON of its material."""
    return hashlib.sha256(json.dumps(material, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def entry_path(material: dict[str, Any]) -> Path:
    return cache_dir() / f"{key(material)}.json"


def load(path: Path, material: dict[str, Any]) -> dict[str, Any] | None:
    """The stored result for ``material``, or None: missing, unreadable, corrupt, or made for other material
    (an entry that is not exactly right is treated as absent and rewritten after the check runs)."""
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict) or entry.get("material") != material:
        return None
    result = entry.get("result")
    if not isinstance(result, dict):
        return None
    problems, params, seconds = result.get("problems"), result.get("parameters_per_rank"), entry.get("seconds")
    if not (isinstance(problems, list) and all(isinstance(p, list) and len(p) == 2
                                               and all(isinstance(s, str) for s in p) for p in problems)):
        return None
    if params is not None and (not isinstance(params, int) or isinstance(params, bool)):
        return None
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return None
    return {"problems": problems, "parameters_per_rank": params, "seconds": float(seconds)}


def store(path: Path, material: dict[str, Any], result: dict[str, Any], seconds: float) -> str | None:
    """Write the entry atomically; on failure (read-only home, full disk) say why instead of raising."""
    entry = {"material": material, "seconds": round(seconds, 3),
             "result": {"problems": [list(p) for p in result["problems"]],
                        "parameters_per_rank": result.get("parameters_per_rank")}}
    try:
        atomic_write(path, json.dumps(entry, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        return f"not cached ({path.parent}: {exc.strerror or exc})"
    return None
