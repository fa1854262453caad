"""A thin, table-driven layer over the Kubernetes Python client (imported lazily, only when a run is applied).

Objects stay plain dicts end to end: apply is server-side apply (idempotent, field manager ``mtk``), reads
return the decoded JSON. Configuration comes from the in-cluster service account or the kubeconfig
(``KUBECONFIG``), exactly as ``kubectl`` finds it; nothing is stored or printed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mtk.exitcodes import UserFacingError

FIELD_MANAGER = "mtk"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"


class KubeError(UserFacingError, RuntimeError):
    """An API call failed; ``status`` is the HTTP status (404 = not found), 0 when no response came back."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Kind:
    """How to reach one kind through the typed client: its API class and method-name suffix."""

    api: str
    suffix: str  # e.g. namespaced_config_map -> patch_namespaced_config_map
    plural: str = ""  # custom resources only
    group: str = ""
    version: str = ""
    installs: str = ""  # custom resources: what installs the CRD, for a 404


_TRAINER = "Kubeflow Trainer v2"
KINDS: dict[str, Kind] = {
    "ConfigMap": Kind("CoreV1Api", "namespaced_config_map"),
    "Secret": Kind("CoreV1Api", "namespaced_secret"),
    "Service": Kind("CoreV1Api", "namespaced_service"),
    "Deployment": Kind("AppsV1Api", "namespaced_deployment"),
    "NetworkPolicy": Kind("NetworkingV1Api", "namespaced_network_policy"),
    "Job": Kind("BatchV1Api", "namespaced_job"),
    "Pod": Kind("CoreV1Api", "namespaced_pod"),
    "PyTorchJob": Kind("CustomObjectsApi", "namespaced_custom_object", "pytorchjobs", "kubeflow.org", "v1",
                       "Kubeflow training operator v1.9"),
    "TrainJob": Kind("CustomObjectsApi", "namespaced_custom_object", "trainjobs", "trainer.kubeflow.org", "v1alpha1",
                     _TRAINER),
    "TrainingRuntime": Kind("CustomObjectsApi", "namespaced_custom_object", "trainingruntimes", "trainer.kubeflow.org",
                            "v1alpha1", _TRAINER),
    # Read only: the TrainJob's JobSet (same name), for its restarts and ready pods.
    "JobSet": Kind("CustomObjectsApi", "namespaced_custom_object", "jobsets", "jobset.x-k8s.io", "v1alpha2",
                   f"JobSet, which {_TRAINER} needs"),
}
# Delete order for cancel: the training job first (stops the pods; a TrainJob's JobSet, Jobs and pods go with it as
# its dependents), the spec last.
DELETE_ORDER = ("TrainJob", "PyTorchJob", "Job", "Deployment", "TrainingRuntime", "Service", "NetworkPolicy",
                "ConfigMap")


def load_api_client():
    """An ApiClient from the in-cluster service account, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    from mtk.extras import requires

    with requires("eks", "the EKS backend"):
        from kubernetes import client, config

    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            pass
    try:
        # Read KUBECONFIG now: the client snapshots it at import time otherwise.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    except (config.ConfigException, OSError) as exc:
        broken = broken_kubeconfig()
        if broken:
            raise KubeconfigError(broken) from None
        raise KubeconfigError(f"no Kubernetes credentials: looked in {_where_looked()} ({exc}). Point KUBECONFIG at "
                              "a kubeconfig, or write one with `aws eks update-kubeconfig --name <cluster>`; "
                              "--dry-run renders the manifests without a cluster") from None
    except Exception as exc:  # the client's parser on a damaged file: yaml errors, TypeError, AttributeError, ...
        raise KubeconfigError(broken_kubeconfig() or f"{_kubeconfig_paths()[0]}: not a kubeconfig the Kubernetes "
                              f"client can read ({type(exc).__name__}: {exc}); {_KUBECONFIG_FIX}") from None
    return client.ApiClient()


class KubeconfigError(KubeError):
    """The kubeconfig file is not YAML, or not a kubeconfig: bad input (exit 2), named with its path."""

    exit_code = 2


_KUBECONFIG_FIX = ("regenerate it with `aws eks update-kubeconfig --name <cluster>` or point KUBECONFIG at a "
                   "working kubeconfig")


def _where_looked() -> str:
    env = os.environ.get("KUBECONFIG")
    files = ", ".join(_kubeconfig_paths())
    incluster = "" if os.environ.get("KUBERNETES_SERVICE_HOST") else "; not in a pod (KUBERNETES_SERVICE_HOST unset)"
    return f"{files} ({'KUBECONFIG' if env else 'the default: KUBECONFIG is not set'}){incluster}"


def _kubeconfig_paths() -> list[str]:
    """The files the client reads, in order: each entry of KUBECONFIG, else ~/.kube/config."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [os.path.expanduser(p) for p in listed] or [os.path.expanduser("~/.kube/config")]


def broken_kubeconfig() -> str | None:
    """Why the first damaged kubeconfig file is unreadable (file and line), or None when each parses as one."""
    import yaml

    for path in _kubeconfig_paths():
        try:
            with open(path, encoding="utf-8") as fh:
                data = yaml.safe_load(fh)
        except OSError:
            continue  # a missing file is the client's "no credentials" case
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = getattr(exc, "problem", None) or exc
            return f"kubeconfig {path} is not valid YAML{where}: {problem}; {_KUBECONFIG_FIX}"
        lists = ("clusters", "contexts", "users")
        if data is not None and (not isinstance(data, dict) or any(
                not isinstance(data.get(k) or [], list) for k in lists)):
            return (f"kubeconfig {path} is not a kubeconfig (a mapping with clusters, contexts and users lists); "
                    f"{_KUBECONFIG_FIX}")
    return None


class Kube:
    """apply / get / list / delete / logs on dicts, in one namespace."""

    def __init__(self, namespace: str, api_client=None):
        self.namespace = namespace
        self._api_client = api_client
        self._apis: dict[str, object] = {}

    @property
    def api_client(self):
        if self._api_client is None:
            self._api_client = load_api_client()
        return self._api_client

    def _api(self, name: str):
        if name not in self._apis:
            from kubernetes import client

            self._apis[name] = getattr(client, name)(self.api_client)
        return self._apis[name]

    def _call(self, kind: str, verb: str, name: str | None = None, **kwargs):
        """Call ``<verb>_<suffix>`` for ``kind``; decode the JSON body; turn ApiException into KubeError."""
        k = KINDS[kind]
        api = self._api(k.api)
        if k.plural:  # custom resources take (group, version, namespace, plural[, name]) positionally
            args = (k.group, k.version, self.namespace, k.plural) + ((name,) if name else ())
        else:
            args = ()
            kwargs["namespace"] = self.namespace
            if name:
                kwargs["name"] = name
        with self._errors(kind, verb):
            resp = getattr(api, f"{verb}_{k.suffix}")(*args, _preload_content=False, **kwargs)
        return _decode(resp)

    @contextlib.contextmanager
    def _errors(self, kind: str, verb: str):
        """API errors and unreachable servers become one KubeError naming the server, never a traceback."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except ApiException as exc:
            message = _describe(exc, kind, verb)
            installs = KINDS.get(kind, Kind("", "")).installs
            if exc.status == 404 and installs and verb in ("patch", "list"):
                message += f" — is the {kind} CRD installed? ({installs})"
            raise KubeError(message, exc.status or 0) from None
        except HTTPError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise KubeError(f"{verb} {kind}: cannot reach the Kubernetes API server at "
                            f"{self.api_client.configuration.host}: {reason}") from None

    def probe(self) -> None:
        """One cheap request (GET /version) before a launch writes anything: no answer means bad set-up (exit 2),
        named with the server, the kubeconfig it came from and how to point elsewhere."""
        from mtk.extras import requires

        with requires("eks", "the EKS backend"):
            from kubernetes import client
            from kubernetes.client.exceptions import ApiException
            from urllib3.exceptions import HTTPError

        host = self.api_client.configuration.host
        try:
            client.VersionApi(self.api_client).get_code(_preload_content=False, _request_timeout=30)
        except ApiException as exc:
            if exc.status not in (401, 403):
                return  # the server answered: anything else is for the calls that follow to report
            raise KubeconfigError(f"the Kubernetes API server at {host} refused the credentials from "
                                  f"{_where_looked()} ({exc.status} {exc.reason}): refresh them with `aws eks "
                                  "update-kubeconfig --name <cluster>`, or point KUBECONFIG at another "
                                  "kubeconfig") from None
        except (HTTPError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise KubeconfigError(f"cannot reach the Kubernetes API server at {host} (from {_where_looked()}): "
                                  f"{reason}. Check the cluster is up and this machine reaches it (VPN, endpoint "
                                  "access), or point KUBECONFIG (or its current-context) at another cluster; "
                                  "--dry-run renders the manifests without a cluster") from None

    def served_operators(self) -> frozenset[str]:
        """The training operators whose resources the API server serves (API discovery: one GET per group)."""
        from .operator_choice import SERVES

        found = set()
        for operator, (group_version, resources) in SERVES.items():
            group, _, version = group_version.partition("/")
            try:
                with self._errors(group_version, "discover"):
                    resp = self._api("CustomObjectsApi").get_api_resources(group, version, _preload_content=False)
            except KubeError as exc:
                if exc.status == 404:  # the group is not installed
                    continue
                raise
            listed = {r.get("name") for r in _decode(resp).get("resources") or [] if isinstance(r, dict)}
            if resources <= listed:
                found.add(operator)
        return frozenset(found)

    def apply(self, body: dict) -> dict:
        """Server-side apply: creates or updates, and a repeat with the same body changes nothing."""
        return self._call(body["kind"], "patch", body["metadata"]["name"], body=body, field_manager=FIELD_MANAGER,
                          force=True, _content_type=APPLY_CONTENT_TYPE)

    def create(self, body: dict) -> dict:
        """Create (POST): HTTP 409 (a KubeError) when an object of that kind and name exists already, whoever
        made it; unlike :meth:`apply`, it never changes one."""
        return self._call(body["kind"], "create", body=body, field_manager=FIELD_MANAGER)

    def get(self, kind: str, name: str) -> dict | None:
        """The object, or None when it does not exist."""
        try:
            return self._call(kind, "get" if KINDS[kind].plural else "read", name)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, label_selector: str) -> list[dict]:
        return list(self._call(kind, "list", label_selector=label_selector).get("items") or [])

    def delete(self, kind: str, name: str) -> bool:
        """Delete with background propagation (owned pods go too); False when it was already gone."""
        try:
            self._call(kind, "delete", name, propagation_policy="Background")
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def pod_log(self, pod: str, container: str | None = None, tail_lines: int | None = None) -> str:
        kwargs: dict[str, object] = {"container": container} if container else {}
        if tail_lines:
            kwargs["tail_lines"] = tail_lines
        with self._errors("Pod", "log"):
            resp = self._api("CoreV1Api").read_namespaced_pod_log(pod, self.namespace, _preload_content=False,
                                                                   **kwargs)
        return resp.data.decode("utf-8", errors="replace")

    def follow_pod_log(self, pod: str, container: str | None = None) -> Iterator[str]:
        """Stream a pod's log lines until the container ends."""
        kwargs: dict[str, object] = {"container": container} if container else {}
        with self._errors("Pod", "log"):
            resp = self._api("CoreV1Api").read_namespaced_pod_log(pod, self.namespace, follow=True,
                                                                   _preload_content=False, **kwargs)
        pending = b""
        try:
            for chunk in resp.stream(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace") + "\n"
            if pending:
                yield pending.decode("utf-8", errors="replace")
        finally:
            resp.release_conn()


def _decode(resp) -> dict:
    data = getattr(resp, "data", resp)
    if isinstance(data, (bytes, bytearray)):
        data = data.decode("utf-8")
    if isinstance(data, str):
        return json.loads(data) if data.strip() else {}
    return data if isinstance(data, dict) else {}


def _describe(exc, kind: str, verb: str) -> str:
    """The API server's own message (Status.message) without headers or tokens."""
    message = exc.reason or ""
    body = getattr(exc, "body", None)
    if body:
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(body).get("message") or message
    return f"{verb} {kind}: HTTP {exc.status}: {message}"


def list_served(kube: Any, kind: str, label_selector: str) -> list[dict]:
    """``kube.list``, where a kind the cluster does not serve (its CRD not installed: 404) has no objects."""
    try:
        return kube.list(kind, label_selector)
    except KubeError as exc:
        if exc.status == 404:
            return []
        raise
