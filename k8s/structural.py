"""Check an object against a CustomResourceDefinition's structural schema, offline and strictly, with no
dependency beyond the standard library.

What the API server enforces for a CRD with a structural schema: the types, the required fields, int-or-string,
patterns (a Quantity's), list-type ``map`` keys unique; and what it would do silently, which is refused here: an
unknown field is pruned by the server (a typo vanishes), so it is a problem here. CEL rules
(``x-kubernetes-validations``) are not evaluated: the bundled PyTorchJob schema carries only the pod template's,
which Kubernetes' own object schemas check (:mod:`k8s.object_schema`); the Trainer's rules that matter to a render
(the TrainJob's name, its runtime's trainer job and container) are checked in :mod:`k8s.manifest_check`.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).resolve().parent / "schemas"
PYTORCHJOB_SCHEMA = SCHEMAS / "pytorchjob-v1.json"
# (apiVersion, kind) -> the CRD schema bundled with mtk (scripts/bundle_crd_schemas.py says where each comes from).
CRD_SCHEMAS: dict[tuple[str, str], Path] = {
    ("kubeflow.org/v1", "PyTorchJob"): PYTORCHJOB_SCHEMA,
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): SCHEMAS / "trainjob-v1alpha1.json",
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): SCHEMAS / "trainingruntime-v1alpha1.json",
}
_INT32 = (-(2**31), 2**31 - 1)

Problem = tuple[str, str]  # (field path, what is wrong and what to write instead)


@functools.cache
def crd_schema(api_version: str, kind: str) -> dict | None:
    """The bundled CRD schema of one custom resource kind, None for any other kind."""
    path = CRD_SCHEMAS.get((api_version, kind))
    return None if path is None else json.loads(path.read_text())["openAPIV3Schema"]


def pytorchjob_schema() -> dict:
    """The PyTorchJob CRD's v1 schema bundled with mtk (see scripts/bundle_crd_schemas.py)."""
    schema = crd_schema("kubeflow.org/v1", "PyTorchJob")
    assert schema is not None
    return schema


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _is(kind: str, value: Any) -> bool:
    return {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
    }.get(kind, True)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check(schema: dict, value: Any, path: str = "") -> list[Problem]:
    """Every problem of ``value`` against ``schema``, as (field path, message)."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = _is("integer", value) or isinstance(value, str)
        return [] if ok else [(path, f"must be an integer or a string, not {_type_name(value)}")]
    if "anyOf" in schema and "type" not in schema:
        branches = [check(b, value, path) for b in schema["anyOf"]]
        return [] if any(not b for b in branches) else branches[0]
    kind = schema.get("type")
    if kind and not _is(kind, value):
        article = "an" if kind[0] in "aeiou" else "a"
        return [(path, f"must be {article} {kind}, not {_type_name(value)}")]
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return [(path, f"'{value}' does not match {schema['pattern']}")]
    if kind == "integer" and schema.get("format") == "int32" and not _INT32[0] <= value <= _INT32[1]:
        return [(path, f"{value} is out of the int32 range")]
    if isinstance(value, dict):
        return _check_object(schema, value, path)
    if isinstance(value, list) and "items" in schema:
        return _check_list(schema, value, path)
    return []


def _check_object(schema: dict, value: dict, path: str) -> list[Problem]:
    problems: list[Problem] = []
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    open_ended = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
    for name in schema.get("required", []):
        if name not in value:
            problems.append((_join(path, name), "is required and missing"))
    for key, item in value.items():
        where = _join(path, str(key))
        if key in props:
            problems += check(props[key], item, where)
        elif isinstance(extra, dict):
            problems += check(extra, item, where)
        elif not open_ended:
            problems.append((where, _unknown(str(key), props)))
    return problems


def _check_list(schema: dict, value: list, path: str) -> list[Problem]:
    problems: list[Problem] = []
    for i, item in enumerate(value):
        problems += check(schema["items"], item, f"{path}[{i}]")
    keys = schema.get("x-kubernetes-list-map-keys")
    if schema.get("x-kubernetes-list-type") == "map" and keys:
        seen: dict[tuple, int] = {}
        for i, item in enumerate(value):
            if isinstance(item, dict):
                key = tuple(item.get(k) for k in keys)
                if key in seen:
                    problems.append((f"{path}[{i}]", f"repeats {'/'.join(keys)} {key} of item {seen[key]}: each "
                                     "must be unique"))
                seen.setdefault(key, i)
    elif schema.get("x-kubernetes-list-type") == "set" and len({json.dumps(v, sort_keys=True) for v in value}) \
            != len(value):
        problems.append((path, "is a set: an item is repeated"))
    return problems


def _unknown(key: str, known) -> str:
    from mtk.suggest import did_you_mean

    return f"unknown field (the API server would drop it){did_you_mean(key, list(known))}"
