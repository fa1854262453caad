"""Load a job spec from YAML plus ``--set`` overrides, and turn every failure into field-named problems."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..secrets import looks_secret
from ..suggest import megatron_field
from . import (
    fetch_checks,  # noqa: F401  (registers the plain-HTTP fetch check)
    memory_checks,  # noqa: F401  (registers the GPU memory fit check)
    recipe_checks,  # noqa: F401  (registers its checks with run_checks)
)
from .base import Section
from .checks import InvalidSection, run_checks
from .errors import Problem, SpecError
from .job import Job


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping: a second ``train:`` block would otherwise
    replace the first one whole, without a word."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: let the constructor report it
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (first on line {first}, again on line {line}); "
                "keep one — the second would silently replace the first", key_node.start_mark)
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)
# YAML 1.1 reads `2:3` as the base-60 integer 123: `nodes: 8:10` (spare nodes) would ask for 490 nodes and
# `time: 01:30:00` would become 5400. Integers here are YAML 1.2's (no sexagesimal form); such values stay strings.
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:int"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"))


def parse_yaml(text: str, where: str) -> object:
    """YAML text -> data; syntax errors and duplicate keys become a Problem naming the line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other C0 controls)
        line = text[: exc.position].count("\n") + 1
        raise SpecError([Problem(f"{where}:line {line}", f"character U+{exc.character:04X} is not allowed in YAML; "
                                 "remove it (quote escapes such as \"\\t\" work inside double quotes)")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise SpecError([Problem(f"{where}:{at}", f"YAML error: {getattr(exc, 'problem', None) or exc}")]) from None
    except RecursionError:
        raise SpecError([Problem(where, "nested too deeply to be a job spec")]) from None


def read_yaml(path: str | Path) -> dict:
    """Parse a job file; a YAML syntax error or duplicate key names the line."""
    path = Path(path)
    if not path.exists():
        raise SpecError([Problem(str(path), "file not found; pass JOB.yaml or create ./mtk.yaml")])
    if path.is_dir():
        raise SpecError([Problem(str(path), "is a directory; pass the job spec file inside it (e.g. mtk.yaml)")])
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise SpecError([Problem(f"{path}:line {line}", f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                                 f"offset {exc.start}); save the spec as UTF-8")]) from None
    except OSError as exc:
        raise SpecError([Problem(str(path), f"cannot read: {exc.strerror}")]) from None
    data = parse_yaml(text, str(path))
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
        try:
            value = parse_yaml(raw, f"--set {key}") if raw.strip() else ""
        except SpecError:
            value = raw  # not YAML (e.g. 'a: b: c'): the text itself
        if isinstance(value, dict):
            dropped = _dropped(_existing(data, key), value, key)
            if dropped:
                raise SpecError([Problem(f"--set {item}", _whole_section(key, value, dropped))])
        node: Any = data
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            nxt = parts[i + 1]
            if isinstance(node, list):
                node = node[_index(node, part, key)]
                continue
            if not isinstance(node, dict):
                raise SpecError([Problem(key, f"cannot set a field inside a {type(node).__name__}")])
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


def _existing(data: dict, key: str) -> object:
    """What ``key`` holds before the override (None where it is not set)."""
    node: Any = data
    for part in key.split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _dropped(old: object, new: object, prefix: str) -> list[str]:
    """The dotted keys set in ``old`` that replacing it by ``new`` would lose."""
    if not isinstance(old, dict):
        return []
    if not isinstance(new, dict):
        return [prefix]
    return [lost for k, v in old.items() for lost in
            ([f"{prefix}.{k}"] if k not in new else _dropped(v, new[k], f"{prefix}.{k}"))]


def _whole_section(key: str, value: dict, dropped: list[str]) -> str:
    """Why a mapping over a section is refused: the fields it leaves out would fall back to their defaults without
    a word (``train={iterations: 5}`` would reset the micro batch and the learning rate)."""
    one_by_one = " ".join(f"--set {k}={_scalar(v)}" for k, v in _dotted(key, value)) or f"--set {key}.FIELD=VALUE"
    shown = ", ".join(dropped[:4]) + (f" and {len(dropped) - 4} more" if len(dropped) > 4 else "")
    return (f"would replace all of {key}, silently dropping {shown} (back to defaults). Set fields one by one: "
            f"{one_by_one}")


def _dotted(prefix: str, value: dict) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for k, v in value.items():
        out += _dotted(f"{prefix}.{k}", v) if isinstance(v, dict) and v else [(f"{prefix}.{k}", v)]
    return out


def _scalar(value: object) -> str:
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


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
        if field is None:  # cluster.<backend>: that backend's own model
            model = model.block_model(part) if hasattr(model, "block_model") else None
            if model is None:
                return None
            continue
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


def _problem_from_error(err: Any) -> Problem:  # one of ValidationError.errors(): pydantic_core.ErrorDetails
    loc = tuple(err["loc"])
    path = ".".join(str(p) for p in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        owner = _model_at(loc)
        valid = owner.accepted_keys() if isinstance(owner, type) and issubclass(owner, Section) else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
        megatron = megatron_field(path)  # a Megatron name: its mtk field, wherever it lives
        hint = f"did you mean {megatron}? " if megatron else f"did you mean '{close[0]}'? " if close else ""
        return Problem(path, f"unknown key; {hint}valid keys here: {', '.join(valid)}")
    if kind == "missing":
        return Problem(path, "required field is missing; add it (or set model.preset for model sizes)")
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "string_pattern_mismatch" and loc == ("name",):
        msg = _name_hint(str(err.get("input")))
    if "unknown preset" in msg:
        path = f"{path}.preset"
    value = err.get("input")
    shown = value if isinstance(value, (str, int, float, bool)) else None
    if any(looks_secret(str(p)) for p in loc):
        shown = None  # never echo what may be a credential
    return Problem(path, msg, shown)


def _name_hint(given: str) -> str:
    """The job name's rule in words with a valid example made from what was given (never the regex)."""
    example = re.sub(r"[^a-z0-9]+", "-", given.lower()).strip("-")[:40].strip("-") or "my-job"
    return (f"use lowercase letters, digits and '-' (at most 40, starting and ending with a letter or digit; it names "
            f"Kubernetes objects), e.g. name: {example}")


def validate(data: dict, source: str | None = None, backend: str | None = None,
             check_files: bool = False) -> Job:
    """Build the Job and run the cross-field checks; raise SpecError listing every problem."""
    try:
        job = Job.model_validate(data)
    except ValidationError as exc:
        fields = [_problem_from_error(e) for e in exc.errors()]
        raise SpecError(fields + _rules_beside(data, exc, backend, check_files), source) from None
    problems = run_checks(job, backend=backend, check_files=check_files)
    if problems:
        raise SpecError(problems, source)
    return job


# What a required field that failed validation is, so that the others can still be built (a check reading it is
# skipped: it stands in as an InvalidSection).
_REQUIRED_STAND_INS = {"name": "partial", "model": {"preset": "tiny"}}


def _rules_beside(data: object, exc: ValidationError, backend: str | None, check_files: bool) -> list[Problem]:
    """The cross-section rules that read only sections which validated: reported with the field errors at once
    (none when the errors are not confined to sections, or the valid sections do not build a Job alone)."""
    errors = exc.errors()
    if not isinstance(data, dict) or any(not e["loc"] for e in errors):
        return []
    failed = {str(e["loc"][0]) for e in errors}
    sections = [f for f in Job.model_fields if f not in failed]
    kept = {k: v for k, v in data.items() if k in sections}
    try:
        valid = Job.model_validate({**kept, **{k: v for k, v in _REQUIRED_STAND_INS.items() if k in failed}})
    except ValidationError:
        return []
    fields: dict[str, Any] = {f: getattr(valid, f) if f in sections else InvalidSection(f) for f in Job.model_fields}
    partial = Job.model_construct(**fields)
    return run_checks(partial, backend=backend, check_files=check_files)


def load_job(path: str | Path, overrides: list[str] | None = None, backend: str | None = None,
             check_files: bool = False) -> Job:
    """Read, override, validate. The one way a CLI verb gets a Job."""
    data = apply_overrides(read_yaml(path), list(overrides or []))
    return validate(data, source=str(path), backend=backend, check_files=check_files)


def load_job_json(path: str | Path) -> Job:
    """Load the serialised spec that travels with a run. It was validated when written, but a hand-edited or
    damaged one gets the same field-named problems as a YAML spec, never a raw pydantic error."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError([Problem(str(path), "job file not found; pass the run's job.json (--job)")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(str(path), "is a directory; pass the run's job.json (--job)")]) from None
    except UnicodeDecodeError:
        raise SpecError([Problem(str(path), "not UTF-8 JSON; render the run again (mtk launch/render)")]) from None
    import json

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SpecError([Problem(f"{path}:line {getattr(exc, 'lineno', '?')}", f"not valid JSON ({exc}); the "
                                 "file is damaged — render the run again (mtk launch/render)")]) from None
    if not isinstance(data, dict):
        raise SpecError([Problem(str(path), "must hold a JSON object (the job spec)")])
    try:
        return Job.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_problem_from_error(e) for e in exc.errors()], str(path)) from None
