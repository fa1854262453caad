"""Check a run's manifests strictly and offline before anything is applied: the PyTorchJob against the training
operator's CRD schema bundled with mtk (:mod:`k8s.structural`), its pod templates and every core object against
Kubernetes' own schema (:mod:`k8s.object_schema`, the ``kubernetes`` client's typed models). Neither needs a
server: ``kubectl apply --dry-run=client`` would.

The first problem is one error naming the file, the object, the field path and the fix; a field the spec sets
verbatim (tolerations, node selector) names that spec field.
"""

from __future__ import annotations

from typing import Any

from mtk.exitcodes import BadInput

from . import object_schema, structural

# Manifest path fragments the spec writes verbatim, and the spec field to fix.
_FROM_SPEC = {".tolerations": "cluster.eks.tolerations", ".nodeSelector": "cluster.eks.node_selector",
              ".imagePullSecrets": "cluster.eks.image_pull_secrets"}


class ManifestInvalid(BadInput, ValueError):
    """A rendered manifest Kubernetes would refuse or silently change: bad input (exit 2), one line."""


def _pod_templates(body: dict) -> list[tuple[str, Any]]:
    specs = ((body.get("spec") or {}).get("pytorchReplicaSpecs") or {})
    if not isinstance(specs, dict):
        return []
    return [(f"spec.pytorchReplicaSpecs.{role}.template", replica.get("template"))
            for role, replica in specs.items() if isinstance(replica, dict) and "template" in replica]


def problems(body: dict, core: bool = True) -> list[tuple[str, str]]:
    """(field path, message) for every problem of one object; ``core``: also against Kubernetes' own schemas
    (needs the ``kubernetes`` client)."""
    if body.get("kind") == "PyTorchJob" and body.get("apiVersion") == "kubeflow.org/v1":
        found = structural.check(structural.pytorchjob_schema(), {k: v for k, v in body.items() if k != "metadata"})
        if core:
            found += object_schema.check_model("V1ObjectMeta", body.get("metadata"), "metadata")
            for path, template in _pod_templates(body):
                found += [p for p in object_schema.check_model(object_schema.POD_TEMPLATE, template, path)
                          if p not in found]
        return found
    return object_schema.check_object(body) if core else []


def _fix(path: str) -> str:
    for fragment, field in _FROM_SPEC.items():
        if fragment in path:
            return f"fix {field} in the spec"
    return "the render is wrong, not the spec: please report it with this line"


def check(objects: list[tuple[str, dict]]) -> str:
    """Raise :class:`ManifestInvalid` for the first problem among ``objects`` ((file, body) pairs, in apply order);
    return a line saying what was checked against what."""
    core = object_schema.available()
    found = []
    for where, body in objects:
        meta = body.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name = f"{body.get('kind', '?')}/{meta.get('name', '?')}"
        found += [(where, name, path, message) for path, message in problems(body, core)]
    if found:
        where, name, path, message = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ManifestInvalid(f"{where}: {name}: {path}: {message}; {_fix(path)}{more}")
    if core:
        return ("manifests checked offline: the PyTorchJob against the training operator's v1.9.0 CRD schema, "
                "it and every other object against Kubernetes' own schemas")
    return ("manifests checked offline against the PyTorchJob CRD schema only: Job, Service, ConfigMap, "
            "NetworkPolicy and the pod templates need the kubernetes client (pip install 'mtk[eks]') to be checked")
