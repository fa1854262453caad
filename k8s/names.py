"""Names and labels of the Kubernetes objects of one run.

Everything a run creates carries ``mtk/run: <run id>`` so ``mtk cancel`` deletes exactly that and nothing
else, and ``mtk/run-dir: <run dir>`` (an annotation: a path is no label value), which says whose the objects are:
a launch refuses to apply over objects another run dir owns (``backend``). The run id comes from the run dir's
name (``<job name>-<UTC time>``), so two launches of the same job never share objects. It must be a DNS-1035 label
that leaves room for the operator's per-replica names (``<job>-worker-<i>`` is both a pod hostname and a Service
name, ≤ 63 characters).
"""

from __future__ import annotations

import hashlib
import posixpath
import re

LABEL_RUN = "mtk/run"
LABEL_COMPONENT = "mtk/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "mtk"
ANNOTATION_RUN_DIR = "mtk/run-dir"

# Where the job spec ConfigMap is mounted in every pod, and the file name inside it.
SPEC_DIR = "/etc/mtk"
SPEC_KEY = "job.json"
SPEC_PATH = f"{SPEC_DIR}/{SPEC_KEY}"

MAX_RUN_ID = 40  # + "-preprocess" (11) + the Job controller's pod suffix stays well under 63
ETCD_PORT = 2379


def run_id(run_dir: str) -> str:
    """A DNS-1035 label (lowercase, starts with a letter, ≤ 40 chars) derived from the run dir's name: the name
    itself when it is one (mtk's own ``<job name>-<UTC time>``; ``r-`` goes before a leading digit), else the
    name made one plus a hash of the name as written, so that two names that differ (``Exp_1``, ``exp-1``; two long
    names alike in their first 31 characters) never share an id. Two run dirs of one name in different folders do
    share one: ``backend`` refuses the second launch."""
    base = posixpath.basename(str(run_dir).rstrip("/"))
    name = re.sub(r"[^a-z0-9-]+", "-", base.lower())
    name = re.sub(r"-{2,}", "-", name).strip("-") or "run"
    lossy = name != base
    if not name[0].isalpha():
        name = f"r-{name}"
    if lossy or len(name) > MAX_RUN_ID:
        digest = hashlib.sha256(base.encode()).hexdigest()[:8]
        name = f"{name[: MAX_RUN_ID - 9].rstrip('-')}-{digest}"
    return name


def run_dir_key(run_dir: str) -> str:
    """The run dir as the ``mtk/run-dir`` annotation records it and ownership is compared (``a/./b/`` is ``a/b``)."""
    return posixpath.normpath(str(run_dir))


def owner(obj: dict) -> str | None:
    """The run dir that an applied object belongs to (its ``mtk/run-dir`` annotation), None when it has none."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RUN_DIR)


def labels(run: str, component: str) -> dict[str, str]:
    """The labels every object and pod of the run carries (plain strings: a ``Step`` is written as its name)."""
    return {LABEL_RUN: run, LABEL_COMPONENT: str(component), LABEL_MANAGED_BY: MANAGER}


def selector(run: str, component: str | None = None) -> str:
    """A label selector string for list calls."""
    parts = [f"{LABEL_RUN}={run}"]
    if component:
        parts.append(f"{LABEL_COMPONENT}={component}")
    return ",".join(parts)


def spec_configmap(run: str) -> str:
    return f"{run}-spec"


def etcd(run: str) -> str:
    """Name of the etcd Deployment and Service (the rendezvous host the workers resolve)."""
    return f"{run}-etcd"


def data_job(run: str, step: str) -> str:
    return f"{run}-{step}"


def pytorchjob(run: str) -> str:
    return run


def trainjob(run: str) -> str:
    """The TrainJob, and so its JobSet and the JobSet's headless Service (Kubeflow Trainer names them alike)."""
    return run


def training_runtime(run: str) -> str:
    """The run's own TrainingRuntime (namespaced, deleted with the run)."""
    return run


def train_policy(run: str) -> str:
    """The NetworkPolicy that admits only the run's own pods to its training pods."""
    return f"{run}-train"
