"""Load a job spec from YAML plus ``--set`` overrides, and turn every failure into field-named problems."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .checks import run_checks
from .errors import Problem, SpecError
from .job import Job


def read_yaml(path: str | Path) -> dict:
    """Parse a job file; a YAML syntax error names the line."""
    path = Path(path)
    if not path.exists():
        raise SpecError([Problem(str(path), "file not found; pass JOB.yaml or create ./mtk.yaml")])
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise SpecError([Problem(f"{path}:{where}", f"YAML syntax error: {getattr(exc, 'problem', exc)}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError([Problem(str(path), "the top level must be a mapping (name:, model:, ...)")])
    return data


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``dotted.key=value`` overrides; values are parsed as YAML scalars/lists (``3``, ``true``, ``[a, b]``)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SpecError([Problem(f"--set {item}", "expected dotted.key=value, e.g. --set train.iterations=50")])
        value = yaml.safe_load(raw) if raw.strip() else ""
        node: Any = data
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            nxt = parts[i + 1]
            if isinstance(node, list):
                node = node[_index(node, part, key)]
                continue
            if part not in node or node[part] is None:
                node[part] = [] if nxt.isdigit() else {}
            node = node[part]
        last = parts[-1]
        if isinstance(node, list):
            idx = int(last) if last.isdigit() else -1
            if idx == len(node):
                node.append(value)
            else:
                node[_index(node, last, key)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise SpecError([Problem(key, f"cannot set a field inside a {type(node).__name__}")])
    return data


def _index(node: list, part: str, key: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise SpecError([Problem(key, f"'{part}' is not an index of a list with {len(node)} items")])
    return int(part)


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that owns the field at ``loc`` (for 'did you mean' suggestions)."""
    model: Any = Job
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _inner_model(field.annotation)
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _problem_from_error(err: dict) -> Problem:
    loc = tuple(err["loc"])
    path = ".".join(str(p) for p in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        owner = _model_at(loc)
        valid = list(owner.model_fields) if owner else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return Problem(path, f"unknown key; {hint}valid keys here: {', '.join(valid)}")
    if kind == "missing":
        return Problem(path, "required field is missing; add it (or set model.preset for model sizes)")
    msg = err["msg"].removeprefix("Value error, ")
    if "unknown preset" in msg:
        path = f"{path}.preset"
    value = err.get("input")
    shown = value if isinstance(value, (str, int, float, bool)) else None
    return Problem(path, msg, shown)


def validate(data: dict, source: str | None = None, backend: str | None = None,
             check_files: bool = False) -> Job:
    """Build the Job and run the cross-field checks; raise SpecError listing every problem."""
    try:
        job = Job.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_problem_from_error(e) for e in exc.errors()], source) from None
    problems = run_checks(job, backend=backend, check_files=check_files)
    if problems:
        raise SpecError(problems, source)
    return job


def load_job(path: str | Path, overrides: list[str] | None = None, backend: str | None = None,
             check_files: bool = False) -> Job:
    """Read, override, validate. The one way a CLI verb gets a Job."""
    data = apply_overrides(read_yaml(path), list(overrides or []))
    return validate(data, source=str(path), backend=backend, check_files=check_files)


def load_job_json(path: str | Path) -> Job:
    """Load the serialised spec that travels with a run (already validated when it was written)."""
    return Job.model_validate_json(Path(path).read_text())
