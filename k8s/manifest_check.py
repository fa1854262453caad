"""Check a run's manifests strictly and offline before anything is applied: the custom resources (PyTorchJob,
TrainJob, TrainingRuntime) against their operators' CRD schemas bundled with mtk (:mod:`k8s.structural`), plus the
admission rules of Kubeflow Trainer's webhooks that a render could break; their pod templates and every core object
against Kubernetes' own schema (:mod:`k8s.object_schema`, the ``kubernetes`` client's typed models). Neither needs
a server: ``kubectl apply --dry-run=client`` would.

The first problem is one error naming the file, the object, the field path and the fix; a field the spec sets
verbatim (tolerations, node selector) names that spec field.
"""

from __future__ import annotations

import re
from typing import Any

from mtk.exitcodes import BadInput

from . import object_schema, structural

# Manifest path fragments the spec writes verbatim, and the spec field to fix.
_FROM_SPEC = {".tolerations": "cluster.eks.tolerations", ".nodeSelector": "cluster.eks.node_selector",
              ".imagePullSecrets": "cluster.eks.image_pull_secrets"}


class ManifestInvalid(BadInput, ValueError):
    """A rendered manifest Kubernetes would refuse or silently change: bad input (exit 2), one line."""


def _pod_templates(body: dict) -> list[tuple[str, Any]]:
    """(path, pod template) of a PyTorchJob's replicas or a TrainingRuntime's replicated jobs."""
    spec = body.get("spec") or {}
    if body.get("kind") == "TrainingRuntime":
        jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
        return [(f"spec.template.spec.replicatedJobs[{i}].template.spec.template",
                 ((job.get("template") or {}).get("spec") or {}).get("template"))
                for i, job in enumerate(jobs if isinstance(jobs, list) else [])
                if isinstance(job, dict) and isinstance(job.get("template"), dict)
                and "template" in (job["template"].get("spec") or {})]
    specs = spec.get("pytorchReplicaSpecs") or {}
    if not isinstance(specs, dict):
        return []
    return [(f"spec.pytorchReplicaSpecs.{role}.template", replica.get("template"))
            for role, replica in specs.items() if isinstance(replica, dict) and "template" in replica]


def problems(body: dict, core: bool = True) -> list[tuple[str, str]]:
    """(field path, message) for every problem of one object; ``core``: also against Kubernetes' own schemas
    (needs the ``kubernetes`` client)."""
    schema = structural.crd_schema(str(body.get("apiVersion")), str(body.get("kind")))
    if schema is not None:
        found = structural.check(schema, {k: v for k, v in body.items() if k != "metadata"})
        found += trainer_rules(body)
        if core:
            found += object_schema.check_model("V1ObjectMeta", body.get("metadata"), "metadata")
            for path, template in _pod_templates(body):
                found += [p for p in object_schema.check_model(object_schema.POD_TEMPLATE, template, path)
                          if p not in found]
        return found
    return object_schema.check_object(body) if core else []


# Kubeflow Trainer v2.3.0's admission rules a render could break (pkg/webhooks, plugins/torch; constants).
_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_TORCHRUN_RESERVED = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                                "PET_MASTER_PORT"})
_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def trainer_rules(body: dict) -> list[tuple[str, str]]:
    """A TrainJob's name is an RFC 1035 label of ≤ 63 characters and its trainer sets none of torchrun's PET_*
    variables (the torch plugin owns them); a TrainingRuntime's trainer job has one replica and a container named
    ``node`` (where the torch plugin injects PET_*)."""
    out: list[tuple[str, str]] = []
    spec: dict = body["spec"] if isinstance(body.get("spec"), dict) else {}
    if body.get("kind") == "TrainJob":
        name = str((body.get("metadata") or {}).get("name", ""))
        if len(name) > 63 or not _RFC1035.match(name):
            out.append(("metadata.name", f"'{name}' must be an RFC 1035 label of at most 63 characters"))
        trainer: dict = spec["trainer"] if isinstance(spec.get("trainer"), dict) else {}
        for i, env in enumerate(trainer.get("env") or []):
            if isinstance(env, dict) and env.get("name") in _TORCHRUN_RESERVED:
                out.append((f"spec.trainer.env[{i}].name", f"{env['name']} is reserved for the torch plugin"))
    elif body.get("kind") == "TrainingRuntime":
        jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
        for i, job in enumerate(jobs if isinstance(jobs, list) else []):
            template = (job.get("template") or {}) if isinstance(job, dict) else {}
            if ((template.get("metadata") or {}).get("labels") or {}).get(_ANCESTOR) != "trainer":
                continue
            if job.get("replicas", 1) != 1:
                out.append((f"spec.template.spec.replicatedJobs[{i}].replicas", "always must be 1 for the trainer"))
            pod = (((template.get("spec") or {}).get("template") or {}).get("spec") or {})
            if not any(isinstance(c, dict) and c.get("name") == "node" for c in pod.get("containers") or []):
                out.append((f"spec.template.spec.replicatedJobs[{i}].template.spec.template.spec.containers",
                            "must contain the container 'node' for the trainer ancestor"))
    return out


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
    crds = " and ".join(sorted({_CRD_SAID[k] for k in (str(b.get("kind")) for _, b in objects) if k in _CRD_SAID}))
    if core:
        return (f"manifests checked offline: {crds or 'no custom resource'}, and every object and pod template "
                "against Kubernetes' own schemas")
    return (f"manifests checked offline against {crds or 'no'} CRD schema only: Job, Service, ConfigMap, "
            "NetworkPolicy and the pod templates need the kubernetes client (pip install 'mtk[eks]') to be checked")


_CRD_SAID = {"PyTorchJob": "the PyTorchJob against the training operator's v1.9.0 CRD schema",
             "TrainJob": "the TrainJob and TrainingRuntime against Kubeflow Trainer v2.3.0's CRD schemas",
             "TrainingRuntime": "the TrainJob and TrainingRuntime against Kubeflow Trainer v2.3.0's CRD schemas"}
