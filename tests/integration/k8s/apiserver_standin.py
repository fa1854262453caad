"""A STAND-IN for the Kubernetes API server (no real one can run on this machine), on 127.0.0.1.

It is not Kubernetes. It speaks just enough of the REST API for mtk's client and for ``kubectl apply``:
discovery, server-side apply (PATCH ``application/apply-patch+yaml``), create (POST), get, list with an
equality ``labelSelector``, delete (with its dependents, as the garbage collector would), pod logs (plain and
``follow``). It records every request, and plays tiny controllers so the waiting logic has something to wait for:
a Deployment becomes ready after a few reads, a batch Job creates a pod and completes (or fails, for names in
``fail_jobs``), a PyTorchJob creates its worker pods and turns Running, and a TrainJob becomes the JobSet and pods
Kubeflow Trainer and JobSet would make of it (tests/support/trainer_env.py), whose state follows what the test
reports of each pod (:meth:`State.pod_ran`): Running, or ended with an exit code — a failed pod restarts the whole
JobSet up to its failurePolicy.maxRestarts, all pods Succeeded complete the JobSet and then the TrainJob.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from support import trainer_env

COLLECTIONS = {
    ("", "v1", "configmaps"): "ConfigMap", ("", "v1", "services"): "Service", ("", "v1", "pods"): "Pod",
    ("", "v1", "secrets"): "Secret",
    ("apps", "v1", "deployments"): "Deployment", ("batch", "v1", "jobs"): "Job",
    ("networking.k8s.io", "v1", "networkpolicies"): "NetworkPolicy",
    ("kubeflow.org", "v1", "pytorchjobs"): "PyTorchJob",
    ("trainer.kubeflow.org", "v1alpha1", "trainjobs"): "TrainJob",
    ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"): "TrainingRuntime",
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"): "JobSet",
}
PATH = re.compile(r"^/(?:api/(?P<cv>v1)|apis/(?P<group>[^/]+)/(?P<gv>[^/]+))/namespaces/(?P<ns>[^/]+)/"
                  r"(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>log))?$")


@dataclass
class Request:
    method: str
    path: str
    query: dict
    content_type: str
    authorization: bool
    body: dict | None = None

    @property
    def kind(self) -> str:
        m = PATH.match(self.path)
        return COLLECTIONS.get((m["group"] or "", m["cv"] or m["gv"], m["plural"]), "?") if m else "?"

    @property
    def name(self) -> str | None:
        m = PATH.match(self.path)
        return m["name"] if m else None


@dataclass
class State:
    objects: dict = field(default_factory=dict)  # (ns, plural, name) -> object
    requests: list[Request] = field(default_factory=list)
    reads: dict = field(default_factory=dict)  # (ns, plural, name) -> GET count
    fail_jobs: set = field(default_factory=set)
    hold_jobs: set = field(default_factory=set)  # Jobs that stay active (a long preprocess)
    missing_plurals: set = field(default_factory=set)  # answer 404 as if the CRD were not installed
    log_not_ready: dict = field(default_factory=dict)  # pod -> how many log reads answer 400 (ContainerCreating)
    ready_after: int = 2  # reads before a Deployment reports ready / a Job finishes
    lock: threading.RLock = field(default_factory=threading.RLock)
    tokens_seen: set = field(default_factory=set)
    log_files: dict = field(default_factory=dict)  # pod -> a file whose text its log reads serve (a real process's)

    def seed(self, obj: dict) -> None:
        """Put an object in place directly (e.g. something that belongs to someone else)."""
        plural = {v: k[2] for k, v in COLLECTIONS.items()}[obj["kind"]]
        with self.lock:
            self.objects[(obj["metadata"].get("namespace", "default"), plural, obj["metadata"]["name"])] = obj

    def of_kind(self, kind: str) -> list[dict]:
        plural = {v: k[2] for k, v in COLLECTIONS.items()}[kind]
        return [o for (_, p, _), o in sorted(self.objects.items()) if p == plural]

    def pod_ran(self, name: str, phase: str, exit_code: int | None = None, ns: str = "default") -> None:
        """What the kubelet reports of a pod: ``Running``, or ended (``Succeeded``/``Failed`` with its exit code).
        The pod's JobSet (and TrainJob) follow at once."""
        with self.lock:
            pod = self.objects[(ns, "pods", name)]
            pod["status"]["phase"] = phase
            state = {"running": {}} if phase == "Running" else {
                "terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error"}}
            pod["status"]["containerStatuses"] = [{"name": trainer_env.NODE, "restartCount": 0, "state": state}]
            owner = next((r["name"] for r in pod["metadata"].get("ownerReferences", []) if r.get("kind") == "JobSet"),
                         None)
            if owner is not None:
                _Controllers(self).reconcile_jobset(ns, owner)


def pod_log_text(pod: str) -> str:
    return "".join(f"{pod}: line {i}\n" for i in range(1, 4))


REASONS = {404: "NotFound", 400: "BadRequest", 409: "AlreadyExists", 415: "UnsupportedMediaType"}


def _status(code: int, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code,
            "reason": REASONS.get(code, "Error")}


def _matches(obj: dict, selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class _Controllers:
    """What the cluster would do after an object is applied or read (deterministic, no threads)."""

    def __init__(self, state: State):
        self.s = state

    def _pod(self, ns: str, name: str, labels: dict, owner: str, phase: str, exit_code: int | None = None):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, "labels": dict(labels),
                            "creationTimestamp": f"2026-11-22T00:00:{len(self.s.objects) % 60:02d}Z",
                            "ownerReferences": [{"name": owner}]},
               "status": {"phase": phase, "containerStatuses": [{"name": "c", "restartCount": 0, "state": {}}]}}
        if exit_code is not None:
            pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": exit_code,
                                                                            "reason": "Error"}}
        self.s.objects[(ns, "pods", name)] = pod

    def applied(self, ns: str, plural: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        if plural == "jobs" and "status" not in obj:
            obj["status"] = {"active": obj["spec"].get("parallelism", 1)}
            labels = obj["spec"]["template"]["metadata"]["labels"]
            self._pod(ns, f"{name}-x7k2p", labels, name, "Running")
        if plural == "pytorchjobs" and "status" not in obj:
            obj["status"] = {"conditions": [
                {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
                {"type": "Running", "status": "True", "reason": "PyTorchJobRunning"}]}
            worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]
            for i in range(worker.get("replicas", 1)):
                self._pod(ns, f"{name}-worker-{i}", worker["template"]["metadata"]["labels"], name, "Running")
        if plural == "deployments" and "status" not in obj:
            obj["status"] = {"replicas": 1, "readyReplicas": 0}
        if plural == "trainjobs" and "status" not in obj:
            self.trainjob_applied(ns, obj)

    def read(self, ns: str, plural: str, name: str, obj: dict) -> None:
        key = (ns, plural, name)
        self.s.reads[key] = n = self.s.reads.get(key, 0) + 1
        if n < self.s.ready_after:
            return
        if plural == "deployments":
            obj["status"]["readyReplicas"] = obj["spec"].get("replicas", 1)
        if plural == "jobs" and not obj["status"].get("conditions") and name not in self.s.hold_jobs:
            failed = name in self.s.fail_jobs
            cond = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit"} if failed else \
                   {"type": "Complete", "status": "True", "reason": "Completed"}
            obj["status"] = {"conditions": [cond],
                             "failed" if failed else "succeeded": 1 if failed else obj["spec"].get("completions", 1)}
            pod = self.s.objects.get((ns, "pods", f"{name}-x7k2p"))
            if pod:
                pod["status"]["phase"] = "Failed" if failed else "Succeeded"
                pod["status"]["containerStatuses"][0]["state"] = {
                    "terminated": {"exitCode": 1 if failed else 0, "reason": "Error" if failed else "Completed"}}

    def deleted(self, ns: str, kind: str, name: str) -> None:
        """Garbage collection of the dependents (background propagation), theirs too: a TrainJob's JobSet, its
        pods. An owner reference without a kind (the stand-in's own pods) matches by name."""
        for key, obj in list(self.s.objects.items()):
            if key[0] != ns or key not in self.s.objects:
                continue
            if any(r.get("name") == name and r.get("kind", kind) == kind
                   for r in obj["metadata"].get("ownerReferences", [])):
                del self.s.objects[key]
                self.deleted(ns, obj.get("kind", ""), key[2])

    # -------------------------------------------------- Kubeflow Trainer v2 + JobSet (tests/support/trainer_env.py)
    def trainjob_applied(self, ns: str, trainjob: dict) -> None:
        """The Trainer builds the JobSet from the TrainJob's runtime; JobSet's Indexed Job creates the pods."""
        ref = trainjob["spec"]["runtimeRef"]
        runtime = self.s.objects.get((ns, "trainingruntimes", ref["name"]))
        if runtime is None:  # the webhook would refuse the TrainJob; a controller marks it failed
            trainjob["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "RuntimeNotFound",
                                                  "message": f"TrainingRuntime {ref['name']} not found"}]}
            return
        js = trainer_env.jobset(trainjob, runtime)
        js["status"] = {"restarts": 0, "replicatedJobsStatus": [
            {"name": trainer_env.NODE, "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]}
        self.s.objects[(ns, "jobsets", js["metadata"]["name"])] = js
        trainjob["status"] = {"jobsStatus": [dict(js["status"]["replicatedJobsStatus"][0])]}
        self._create_pods(ns, js)

    def _create_pods(self, ns: str, js: dict) -> None:
        attempt = js["status"]["restarts"]
        for pod in trainer_env.pods(js, attempt, suffix=f"a{attempt}x7k"):
            pod["metadata"]["creationTimestamp"] = f"2026-11-22T00:{attempt:02d}:00Z"
            pod["status"]["containerStatuses"] = [{"name": trainer_env.NODE, "restartCount": 0,
                                                   "state": {"waiting": {"reason": "PodInitializing"}}}]
            self.s.objects[(ns, "pods", pod["metadata"]["name"])] = pod

    def reconcile_jobset(self, ns: str, name: str) -> None:
        """JobSet's view of its pods: a failed pod fails its Job (backoffLimit 0) and restarts the JobSet (all of
        its pods, recreated) while restarts < failurePolicy.maxRestarts, else fails it; all pods Succeeded
        complete it; all Running (or done) make its Job ready. The Trainer copies Complete/Failed to the TrainJob."""
        js = self.s.objects.get((ns, "jobsets", name))
        if js is None:
            return
        status = js["status"]
        pods = [o for (n, p, _), o in sorted(self.s.objects.items()) if n == ns and p == "pods"
                and o["metadata"]["labels"].get(trainer_env.JOBSET_NAME) == name
                and o["metadata"]["labels"].get(trainer_env.RESTART_ATTEMPT) == str(status["restarts"])]
        phases = [p["status"]["phase"] for p in pods]
        jobs = status["replicatedJobsStatus"][0]
        conditions = status.setdefault("conditions", [])
        if "Failed" in phases:
            most = ((js["spec"].get("failurePolicy") or {}).get("maxRestarts")) or 0
            if status["restarts"] < most:
                for pod in pods:  # the Jobs of this attempt are deleted, their pods with them
                    del self.s.objects[(ns, "pods", pod["metadata"]["name"])]
                status["restarts"] += 1
                jobs.update(ready=0, active=1)
                self._create_pods(ns, js)
            else:
                jobs.update(failed=1, active=0)
                conditions.append({"type": "Failed", "status": "True", "reason": "FailedJobs",
                                   "message": "jobset failed due to reaching max number of restarts"})
        elif phases and all(ph == "Succeeded" for ph in phases):
            jobs.update(succeeded=1, active=0, ready=0)
            conditions.append({"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                               "message": "jobset completed successfully"})
        else:
            jobs["ready"] = int(bool(phases) and all(ph in ("Running", "Succeeded") for ph in phases))
        trainjob = self.s.objects.get((ns, "trainjobs", name))
        if trainjob is not None:
            trainjob["status"] = {"jobsStatus": [dict(jobs)]}
            for cond in conditions:
                kind = {"Completed": "Complete", "Failed": "Failed"}.get(cond["type"])
                if kind:
                    trainjob["status"]["conditions"] = [{**cond, "type": kind}]


def discovery(path: str, missing: set | frozenset = frozenset()) -> dict | None:
    """Just enough API discovery for ``kubectl`` (and ``cluster.eks.operator: auto``) to map the kinds mtk renders to
    their endpoints; a plural in ``missing`` is not served (its CRD is not installed), nor a group left empty."""
    groups: dict = {}
    for (group, version, plural), kind in COLLECTIONS.items():
        if plural in missing:
            continue
        groups.setdefault((group, version), []).append(
            {"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})
    if path == "/version":
        return {"major": "1", "minor": "32", "gitVersion": "v1.32.0-standin", "platform": "linux/amd64"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
             "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for (g, v) in groups if g]}
    for (g, v), resources in groups.items():
        if path == (f"/apis/{g}/{v}" if g else f"/api/{v}"):
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{g}/{v}" if g else v,
                    "resources": resources}
    return None


def _handler(state: State):
    controllers = _Controllers(state)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            """Keep the stand-in's request log out of the test output (requests are recorded in state)."""

        def _send(self, code: int, payload, content_type="application/json"):
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self, body=None) -> tuple[re.Match | None, dict]:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Bearer "):
                state.tokens_seen.add(auth[7:])
            state.requests.append(Request(self.command, url.path, query, self.headers.get("Content-Type", ""),
                                          bool(auth), body))
            return PATH.match(url.path), query

        def _read_body(self):
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"null")

        def do_PATCH(self):
            body = self._read_body()
            m, query = self._record(body)
            if not m or not m["name"] or m["plural"] in state.missing_plurals:
                return self._send(404, _status(404, "the server could not find the requested resource"))
            if self.headers.get("Content-Type") != "application/apply-patch+yaml":
                return self._send(415, _status(415, "stand-in only does server-side apply"))
            if not query.get("fieldManager"):
                return self._send(400, _status(400, "fieldManager is required for apply patch"))
            if body["metadata"]["name"] != m["name"]:
                return self._send(400, _status(400, "name in body does not match the URL"))
            key = (m["ns"], m["plural"], m["name"])
            with state.lock:
                old = state.objects.get(key)
                obj = copy.deepcopy(body)
                if old is not None and "status" in old:
                    obj["status"] = old["status"]
                obj["metadata"].setdefault("namespace", m["ns"])
                state.objects[key] = obj
                controllers.applied(m["ns"], m["plural"], obj)
                return self._send(200, obj)

        def do_POST(self):
            """Create (what a client-side ``kubectl apply`` sends for an object that does not exist yet)."""
            body = self._read_body()
            m, _query = self._record(body)
            if not m or m["name"] or m["plural"] in state.missing_plurals:
                return self._send(404, _status(404, "the server could not find the requested resource"))
            key = (m["ns"], m["plural"], body["metadata"]["name"])
            with state.lock:
                if key in state.objects:
                    return self._send(409, _status(409, f'{m["plural"]} "{key[2]}" already exists'))
                obj = copy.deepcopy(body)
                obj["metadata"].setdefault("namespace", m["ns"])
                state.objects[key] = obj
                controllers.applied(m["ns"], m["plural"], obj)
                return self._send(201, obj)

        def do_GET(self):
            found = discovery(urlsplit(self.path).path.rstrip("/"), state.missing_plurals)
            if found is not None:
                return self._send(200, found)
            m, query = self._record()
            if not m or m["plural"] in state.missing_plurals:
                return self._send(404, _status(404, "the server could not find the requested resource"))
            with state.lock:
                if m["sub"] == "log":
                    return self._log(m, query)
                if m["name"]:
                    obj = state.objects.get((m["ns"], m["plural"], m["name"]))
                    if obj is None:
                        return self._send(404, _status(404, f'{m["plural"]} "{m["name"]}" not found'))
                    controllers.read(m["ns"], m["plural"], m["name"], obj)
                    return self._send(200, obj)
                items = [o for (ns, p, _), o in sorted(state.objects.items())
                         if ns == m["ns"] and p == m["plural"] and _matches(o, query.get("labelSelector", ""))]
                return self._send(200, {"kind": "List", "apiVersion": "v1", "items": items})

        def _log(self, m, query):
            if (m["ns"], "pods", m["name"]) not in state.objects:
                return self._send(404, _status(404, f'pods "{m["name"]}" not found'))
            if state.log_not_ready.get(m["name"], 0) > 0:
                state.log_not_ready[m["name"]] -= 1
                return self._send(400, _status(400, f'container "c" in pod "{m["name"]}" is waiting to start: '
                                                    "ContainerCreating"))
            log_file = state.log_files.get(m["name"])
            text = log_file.read_text(errors="replace") if log_file else pod_log_text(m["name"])
            if query.get("tailLines"):
                text = "".join(text.splitlines(True)[-int(query["tailLines"]):])
            if query.get("follow") != "true":
                return self._send(200, text.encode(), "text/plain")
            # Streamed: lines arrive over time, the connection closes when the "container" ends.
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            state.lock.release()
            try:
                for line in text.splitlines(True):
                    self.wfile.write(line.encode())
                    self.wfile.flush()
                    time.sleep(0.05)
            finally:
                state.lock.acquire()

        def do_DELETE(self):
            m, _query = self._record()
            if not m or not m["name"]:
                return self._send(404, _status(404, "no such path"))
            with state.lock:
                obj = state.objects.pop((m["ns"], m["plural"], m["name"]), None)
                if obj is None:
                    return self._send(404, _status(404, f'{m["plural"]} "{m["name"]}" not found'))
                controllers.deleted(m["ns"], obj.get("kind", ""), m["name"])
                return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    return Handler


class StandIn:
    """Start/stop the stand-in; ``url`` is http://127.0.0.1:<port>."""

    def __init__(self):
        self.state = State()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
