"""The run record: enough to find a run again from another shell (backend, ids, paths, time)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mtk.backend_registry import backend_names
from mtk.exitcodes import BadInput
from mtk.files import atomic_write
from mtk.run_layout import RunLayout

RECORD = "run.json"


class Run(BaseModel):
    """A submitted run. ``ids`` maps step name -> backend id (Slurm job id, pid, object name).

    ``run_dir`` is the run dir as the nodes/pods see it; ``record_dir`` is where this machine keeps the run
    record when that path is not local (EKS pods write to FSx, the laptop keeps ``./runs/<run>``).
    ``launch_error`` is set when ``mtk launch`` failed after writing the run dir (a refused ``sbatch``, an API
    error mid-apply): such a record tells the truth in ``mtk ls``/``status`` and is never the default RUN.
    """

    # run.json is read strictly: a hand-edited or foreign file is named as damaged, never half-believed.
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    backend: str
    run_dir: str
    name: str
    created: float = Field(default_factory=time.time)
    ids: dict[str, str] = Field(default_factory=dict)
    # What the backend noted at submit to find its run again (a Slurm config path and job names, a namespace and
    # object name, the launching host); only that backend reads it. run.json keeps it under "extra".
    backend_notes: dict[str, Any] = Field(default_factory=dict, alias="extra")
    record_dir: str = ""
    launch_error: str = ""

    @property
    def job_file(self) -> Path:
        return RunLayout.of(self.run_dir).job_file

    def save(self) -> Path:
        path = Path(self.record_dir or self.run_dir) / RECORD
        data = self.model_dump(by_alias=True)
        if not self.launch_error:  # a submitted run's record keeps the fields it always had
            del data["launch_error"]
        atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Run:
        """Read a run record; a damaged one is reported by name (exit 2), not as a traceback."""
        path = Path(path)
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise DamagedRecord(f"{path}: the run record is damaged ({exc}); it is rewritten at launch only — "
                                f"restore it from a copy, or pass the run dir of another run") from None
        try:
            run = cls.model_validate(data)
        except ValidationError as exc:
            problems = exc.errors()
            if not isinstance(data, dict) or any(e["type"] in ("missing", "extra_forbidden") for e in problems):
                required = [name for name, f in cls.model_fields.items() if f.is_required()]
                optional = sorted(f.alias or name for name, f in cls.model_fields.items() if name not in required)
                raise DamagedRecord(f"{path}: not an mtk run record (needs {', '.join(required)}; may have "
                                    f"{', '.join(optional)})") from None
            bad = dict.fromkeys(str(e["loc"][0]) for e in problems if e["loc"])
            raise DamagedRecord(f"{path}: the run record is damaged (wrong type for {', '.join(bad)})") from None
        names = backend_names()
        if run.backend not in names:
            raise DamagedRecord(f"{path}: unknown backend {run.backend!r} (one of {', '.join(names)}); a run "
                                "launched with another needs the distribution that registers it installed here")
        return run


def new_run_dir(runs_dir: str | Path, name: str, now: float | None = None) -> Path:
    """``<runs_dir>/<name>-<UTC timestamp>``, made absolute so every node resolves the same path: a name free now,
    for the checks a launch makes first; :func:`reserve_run_dir` then makes it, exclusively."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    base = Path(runs_dir).expanduser().absolute() / f"{name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def reserve_run_dir(run_dir: str | Path, here: str | Path | None = None) -> tuple[list[Path], Path]:
    """Make the directory a launch writes into, exclusively (``mkdir`` without ``exist_ok``: of two launches
    that picked one name in the same second, the second takes the next free suffix, ``-2``, ``-3``, …), so no two
    launches ever share a run dir. ``here``: where the files land when ``run_dir`` is not on this machine (EKS
    keeps ``./runs/<run>``; a preview too); the name is reserved there. Returns (the dirs made, deepest first: what
    to remove if the launch is refused; the run dir)."""
    run_dir = Path(run_dir)
    parent = Path(here).expanduser().absolute() if here is not None else run_dir.parent
    missing = [p for p in (parent, *parent.parents) if not p.exists()]
    parent.mkdir(parents=True, exist_ok=True)
    base = re.sub(r"-\d+$", "", run_dir.name) if re.search(r"-\d{8}-\d{6}-\d+$", run_dir.name) else run_dir.name
    leaf, n = run_dir.name, 1
    while True:
        try:
            os.mkdir(parent / leaf)
            return [parent / leaf, *missing], run_dir.with_name(leaf)
        except FileExistsError:
            n += 1
            leaf = f"{base}-{n}"


class DamagedRecord(BadInput, ValueError):
    """run.json exists but cannot be a run record: named with the path, exit code 2."""


class RunNotFound(BadInput, FileNotFoundError):
    """RUN names no run record; the message says what was looked for. Bad input, as README's exit codes say (2)."""


class AmbiguousRun(BadInput, ValueError):
    """RUN is a prefix of several run names: refused with the candidates, never a guess (exit 2)."""


def resolve_run(ref: str, runs_dir: str | Path = "runs") -> tuple[Run, str]:
    """The one reading of RUN every verb uses, and how it matched ("" when named exactly, else a note to show).

    In order: a run dir or its run.json; a run-dir name under ``runs_dir``; a job name (its newest run); a prefix
    of exactly one run-dir name. A name never reaches another run by prefix when it names one exactly (``tiny`` is
    not ``tiny-corpus-…``), and a prefix of several is refused naming them."""
    candidate = Path(ref)
    if candidate.is_file():
        return Run.load(candidate), ""
    if (candidate / RECORD).is_file():
        return Run.load(candidate / RECORD), ""
    root = Path(runs_dir)
    if "/" in ref or ref in ("", ".", ".."):
        raise RunNotFound(f"no run '{ref}': {ref} holds no {RECORD}; pass a run dir or a run name under {root}/")
    if (root / ref / RECORD).is_file():
        return Run.load(root / ref / RECORD), ""
    named = [r for r in run_records(root) if r.name == ref]
    if named:
        note = "" if len(named) == 1 else f" (the newest of {len(named)} runs of job {ref})"
        return named[0], note
    dirs = sorted(p.name for p in root.glob("*") if p.name.startswith(ref) and (p / RECORD).is_file()) \
        if root.is_dir() else []
    if len(dirs) == 1:
        return Run.load(root / dirs[0] / RECORD), f" (the one run under {root}/ whose name starts with {ref})"
    if dirs:
        shown = ", ".join(dirs[:10]) + (f" and {len(dirs) - 10} more" if len(dirs) > 10 else "")
        raise AmbiguousRun(f"RUN '{ref}' is the start of {len(dirs)} run names under {root}/: {shown}; "
                           "pass one of them (or a longer prefix)")
    raise RunNotFound(f"no run '{ref}': no run dir, run name or job name under {root}/ is or starts with '{ref}' "
                      f"(`mtk ls --runs-dir {root}` lists them); pass a run dir (with {RECORD}) or a run name")


def run_records(runs_dir: str | Path = "runs") -> list[Run]:
    """Every run recorded under ``runs_dir`` (one level deep), newest first."""
    root = Path(runs_dir)
    runs = []
    for record in root.glob(f"*/{RECORD}") if root.is_dir() else []:
        try:
            run = Run.load(record)
        except (OSError, ValueError, TypeError):
            continue  # a half-copied or foreign run.json: `mtk ls` reports the rest
        runs.append(run)
    return sorted(runs, key=lambda r: (r.created, r.run_dir), reverse=True)


def newest_run(runs_dir: str | Path = "runs") -> Run:
    """The newest run whose launch submitted it: a failed launch has nothing to follow, so it is never the
    default RUN (``mtk status NAME`` still shows it)."""
    runs = run_records(runs_dir)
    submitted = [r for r in runs if not r.launch_error]
    if not submitted:
        failed = "".join(f"; {Path(r.record_dir or r.run_dir).name}: its launch failed ({r.launch_error})"
                         for r in runs[:3])
        raise RunNotFound(f"no runs under {Path(runs_dir)}/ (no */{RECORD} of a submitted run{failed}): launch "
                          "one with `mtk launch`, or pass RUN / --runs-dir")
    return submitted[0]


def failed_launches_since(run: Run, runs_dir: str | Path = "runs") -> list[Run]:
    """The failed launches newer than ``run``: what a bare ``mtk status`` passed over, to say so."""
    return [r for r in run_records(runs_dir) if r.launch_error and (r.created, r.run_dir) > (run.created, run.run_dir)]
