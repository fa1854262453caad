"""Check a core Kubernetes object (ConfigMap, Service, Deployment, Job, NetworkPolicy, a pod template) against
Kubernetes' own schema offline: the typed models of the ``kubernetes`` client (``mtk[eks]``, which ``mtk launch``
applies with), each carrying its fields' JSON names (``attribute_map``), types (``openapi_types``) and which are
required. Strict as the API server is, and stricter where it would be silent: an unknown field (which the server
would drop) is a problem, a string where an integer goes is a problem.

The models keep two of the API's types as plain strings or objects; :data:`QUANTITY` names the fields that are
Kubernetes Quantities (a number or a string like ``64Gi``), and an ``object`` typed ``int | str`` is an
IntOrString. tests/unit/k8s/test_manifest_check.py keeps :data:`QUANTITY` equal to the Quantity fields of
Kubernetes' published schema for every model these kinds reach.

The client is imported on first use only: ``mtk --help`` and the verbs that check nothing never load it.
"""

from __future__ import annotations

import functools
import re
import typing
from typing import Any

from .structural import Problem, _join, _type_name, _unknown

# (apiVersion, kind) -> the client model that describes it
KINDS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Service"): "V1Service",
    ("v1", "Secret"): "V1Secret",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("batch/v1", "Job"): "V1Job",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
}
POD_TEMPLATE = "V1PodTemplateSpec"
# (model, JSON field): a resource.Quantity in Kubernetes' schema, a plain string in the client's models.
QUANTITY = frozenset({
    ("V1EmptyDirVolumeSource", "sizeLimit"), ("V1PodSpec", "overhead"), ("V1ResourceFieldSelector", "divisor"),
    ("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests"),
    ("V1VolumeResourceRequirements", "limits"), ("V1VolumeResourceRequirements", "requests"),
})
# Kubernetes' Quantity grammar (apimachinery resource.Quantity), as its CRD schemas write it.
_QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+"
                       r"(\.[0-9]*)?)|(\.[0-9]+))))?$")
_PRIMITIVE = {"str": "a string", "int": "an integer", "bool": "a boolean", "float": "a number",
              "datetime": "a string (RFC 3339 time)", "date": "a string (date)", "bytes": "a string (base64)"}


def available() -> bool:
    """Whether the client's models can be loaded here (``mtk[eks]`` installed)."""
    try:
        import kubernetes.client.models  # noqa: F401
    except ImportError:
        return False
    return True


def _models():
    import kubernetes.client.models as models

    return models


@functools.cache
def _fields(model: str) -> dict[str, tuple[str, str, bool, bool]]:
    """JSON name -> (attribute, type, required, int-or-string) for one client model."""
    cls = getattr(_models(), model)
    out = {}
    for attr, json_name in cls.attribute_map.items():
        info = cls.model_fields.get(attr)
        required = bool(info is not None and info.is_required())
        args = set(typing.get_args(info.annotation)) if info is not None else set()
        int_or_str = cls.openapi_types[attr] == "object" and any(_base(a) is int for a in args) and \
            any(_base(a) is str for a in args)
        out[json_name] = (attr, cls.openapi_types[attr], required, int_or_str)
    return out


def _base(annotation) -> Any:
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def check_object(body: dict) -> list[Problem]:
    """The problems of a whole object of one of :data:`KINDS` (its apiVersion and kind checked too)."""
    key = (body.get("apiVersion"), body.get("kind"))
    model = KINDS.get(key)  # type: ignore[arg-type]
    if model is None:
        return [("kind", f"{key[1]} ({key[0]}) has no bundled schema")]
    problems = check_model(model, body, "")
    if not (body.get("metadata") or {}).get("name"):
        problems.insert(0, ("metadata.name", "is required to apply the object and missing"))
    return problems


def check_model(model: str, value: Any, path: str) -> list[Problem]:
    if not isinstance(value, dict):
        return [(path, f"must be an object ({model}), not {_type_name(value)}")]
    fields = _fields(model)
    problems: list[Problem] = []
    for json_name, (_, _, required, _) in fields.items():
        if required and value.get(json_name) is None:
            problems.append((_join(path, json_name), "is required and missing"))
    for key, item in value.items():
        where = _join(path, str(key))
        if key not in fields:
            problems.append((where, _unknown(str(key), fields)))
        elif item is not None:
            _, kind, _, int_or_str = fields[key]
            problems += _check_type(kind, item, where, int_or_str, (model, key) in QUANTITY)
    return problems


def _check_type(kind: str, value: Any, path: str, int_or_str: bool = False, quantity: bool = False) -> list[Problem]:
    if m := re.fullmatch(r"List\[(.+)\]", kind):
        if not isinstance(value, list):
            return [(path, f"must be a list, not {_type_name(value)}")]
        return [p for i, v in enumerate(value) for p in _check_type(m[1], v, f"{path}[{i}]", quantity=quantity)]
    if m := re.fullmatch(r"Dict\[str, (.+)\]", kind):
        if not isinstance(value, dict):
            return [(path, f"must be a map, not {_type_name(value)}")]
        return [p for k, v in value.items() for p in _check_type(m[1], v, _join(path, str(k)), quantity=quantity)]
    if quantity:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) or \
            (isinstance(value, str) and _QUANTITY.match(value))
        return [] if ok else [(path, f"must be a quantity (a number or e.g. '500m', '64Gi'), not {value!r}")]
    if kind == "object":
        if int_or_str and not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
            return [(path, f"must be an integer or a string, not {_type_name(value)}")]
        return []
    if kind in _PRIMITIVE:
        ok = {"int": isinstance(value, int) and not isinstance(value, bool), "bool": isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool)}.get(kind,
                                                                                          isinstance(value, str))
        return [] if ok else [(path, f"must be {_PRIMITIVE[kind]}, not {_type_name(value)}")]
    return check_model(kind, value, path)
