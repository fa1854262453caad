"""submit / status / logs / cancel through the real Kubernetes Python client against an API-server STAND-IN
(a small recording HTTP server on 127.0.0.1, see apiserver_standin.py; no real API server runs here)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mtk.k8s import names, yamlio
from mtk.k8s.backend import EksBackend, SubmitError, UnknownNode

from mtk.runs import Run

pytestmark = pytest.mark.integration


def _job_with_data(jobs):
    return jobs.tiny_eks(data={"fetch": [{"url": "https://example.com/c.jsonl", "path": "c.jsonl"},
                                         {"url": "https://example.com/t.json", "path": "t.json"}],
                               "corpus": {"input": "c.jsonl", "output_prefix": "tok/c"},
                               "tokenizer": {"type": "HuggingFaceTokenizer", "model": "t.json"},
                               "blend": [{"prefix": "tok/c_text_document"}]})


def _launch(tmp_path: Path, job, name="tiny-eks-20261122-010203"):
    backend = EksBackend(poll=0.01, say=lambda msg: None)
    art = backend.render(job, str(tmp_path / name))
    art.write()
    return backend, job, art


def _run(art) -> str:
    return names.run_id(art.run_dir)


def _writes(state) -> list[tuple[str, str, str]]:
    return [(r.method, r.kind, r.name) for r in state.requests if r.method != "GET"]


def test_submit_applies_in_order_and_waits(standin, k8s_jobs, kube_token, tmp_path):
    backend, job, art = _launch(tmp_path, _job_with_data(k8s_jobs))
    run = backend.submit(job, art)
    run_name = names.run_id(art.run_dir)
    s = standin.state
    patches = [(kind, name) for method, kind, name in _writes(s) if method == "PATCH"]
    assert patches == [("ConfigMap", f"{run_name}-spec"), ("NetworkPolicy", f"{run_name}-etcd"),
                       ("Service", f"{run_name}-etcd"),
                       ("Deployment", f"{run_name}-etcd"), ("Job", f"{run_name}-getdata"),
                       ("Job", f"{run_name}-preprocess"), ("NetworkPolicy", f"{run_name}-train"),
                       ("PyTorchJob", run_name)]
    # Server-side apply with mtk's field manager, authenticated with the kubeconfig's token.
    for r in s.requests:
        if r.method == "PATCH":
            assert r.content_type == "application/apply-patch+yaml"
            assert r.query["fieldManager"] == "mtk" and r.query["force"] == "true"
        assert r.authorization
    assert s.tokens_seen == {kube_token}
    # Waited: etcd read until ready before the first data Job; each Job read until complete before the next.
    order = [(r.method, r.kind, r.name) for r in s.requests]
    first_job_patch = order.index(("PATCH", "Job", f"{run_name}-getdata"))
    assert ("GET", "Deployment", f"{run_name}-etcd") in order[:first_job_patch]
    pre_patch = order.index(("PATCH", "Job", f"{run_name}-preprocess"))
    assert order[pre_patch - 1] == ("GET", "Job", f"{run_name}-getdata")
    train_patch = order.index(("PATCH", "NetworkPolicy", f"{run_name}-train"))  # training's first object
    assert order[train_patch - 1] == ("GET", "Job", f"{run_name}-preprocess")
    assert order[train_patch + 1] == ("PATCH", "PyTorchJob", run_name)
    # Everything applied carries the run label; the stored objects are what was rendered.
    for (_, plural, _), obj in s.objects.items():
        if plural != "pods":
            assert obj["metadata"]["labels"][names.LABEL_RUN] == run_name
    assert run.backend_notes == {"namespace": "default", "run_id": run_name, "operator": "pytorchjob"}
    assert run.ids["train"] == f"PyTorchJob/{run_name}"
    # run.json is saved (status/cancel work from another shell) and holds no credential.
    saved = (Path(art.run_dir) / "run.json").read_text()
    assert json.loads(saved)["extra"]["run_id"] == run_name
    for f in Path(art.run_dir).rglob("*"):
        if f.is_file():
            assert kube_token not in f.read_text(errors="replace")


def test_reapply_is_idempotent(standin, k8s_jobs, tmp_path):
    backend, job, art = _launch(tmp_path, _job_with_data(k8s_jobs))
    backend.submit(job, art)
    s = standin.state
    # The first launch claims the run id with one create (its spec ConfigMap), then applies.
    assert [(r.kind, r.body["metadata"]["name"]) for r in s.requests if r.method == "POST"] == \
        [("ConfigMap", f"{_run(art)}-spec")]
    snapshot = lambda: json.dumps({"/".join(k): v for k, v in s.objects.items()}, sort_keys=True)  # noqa: E731
    before = snapshot()
    n_requests = len(s.requests)
    n_patches = sum(1 for r in s.requests if r.method == "PATCH")
    backend.submit(job, art)  # the same run dir again: its own objects, applied over
    patches = [r for r in s.requests if r.method == "PATCH"]
    assert len(patches) == 2 * n_patches
    assert [(r.kind, r.name) for r in patches[:n_patches]] == [(r.kind, r.name) for r in patches[n_patches:]]
    assert snapshot() == before, "a repeat changes nothing"
    assert not any(r.method in ("POST", "PUT", "DELETE") for r in s.requests[n_requests:])


def test_failed_data_job_raises_with_its_pod_log_and_stops(standin, k8s_jobs, tmp_path):
    backend, job, art = _launch(tmp_path, _job_with_data(k8s_jobs))
    run_name = names.run_id(art.run_dir)
    standin.state.fail_jobs.add(f"{run_name}-getdata")
    with pytest.raises(SubmitError) as err:
        backend.submit(job, art)
    msg = str(err.value)
    assert f"getdata Job {run_name}-getdata failed" in msg and "backoff limit" in msg
    assert f"[{run_name}-getdata-x7k2p] {run_name}-getdata-x7k2p: line 3" in msg
    kinds = [(r.kind, r.name) for r in standin.state.requests if r.method == "PATCH"]
    assert ("PyTorchJob", run_name) not in kinds and ("Job", f"{run_name}-preprocess") not in kinds
    # The run record exists even though submit failed, so status shows why.
    run = Run.load(Path(art.run_dir) / "run.json")
    states = {s.step: s for s in backend.status(run) if not s.id.startswith("pod/")}
    assert states["getdata"].state == "FAILED"
    assert states["train"].state == "PENDING" and "waits for getdata" in states["train"].reason
    assert any("line 3" in line for line in states["getdata"].log_tail)


def test_status_maps_conditions_and_pods(standin, k8s_jobs, tmp_path):
    backend, job, art = _launch(tmp_path, _job_with_data(k8s_jobs))
    run = backend.submit(job, art)
    run_name = names.run_id(art.run_dir)
    out = backend.status(run)
    by_step = {s.step: s for s in out if not s.id.startswith("pod/")}
    assert by_step["etcd"].state == "RUNNING"
    assert by_step["getdata"].state == by_step["preprocess"].state == "COMPLETED"
    assert by_step["train"].state == "RUNNING" and "PyTorchJobRunning" in by_step["train"].reason
    pods = {s.id: s for s in out if s.id.startswith("pod/")}
    assert pods[f"pod/{run_name}-worker-0"].state == "RUNNING"
    assert pods[f"pod/{run_name}-worker-1"].step == "train"
    assert pods[f"pod/{run_name}-getdata-x7k2p"].state == "COMPLETED"
    # The operator reports success: the step follows.
    ptj = standin.state.objects[("default", "pytorchjobs", run_name)]
    ptj["status"]["conditions"].append({"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"})
    assert {s.step: s.state for s in backend.status(run) if not s.id.startswith("pod/")}["train"] == "COMPLETED"


def test_logs_plain_follow_and_one_pod(standin, k8s_jobs, tmp_path):
    backend, job, art = _launch(tmp_path, _job_with_data(k8s_jobs))
    run = backend.submit(job, art)
    run_name = names.run_id(art.run_dir)
    lines = list(backend.logs(run))
    assert lines == [f"[{run_name}-worker-{i}] {run_name}-worker-{i}: line {n}\n" for i in (0, 1) for n in (1, 2, 3)]
    one = list(backend.logs(run, node="worker-1"))
    assert one == [f"{run_name}-worker-1: line {n}\n" for n in (1, 2, 3)]
    followed = list(backend.logs(run, follow=True))
    assert sorted(followed) == sorted(lines)
    for i in (0, 1):  # each pod's lines stay in order when interleaved
        mine = [line for line in followed if line.startswith(f"[{run_name}-worker-{i}]")]
        assert mine == [line for line in lines if line.startswith(f"[{run_name}-worker-{i}]")]
    # A container still being created answers 400; following waits for it.
    standin.state.log_not_ready[f"{run_name}-worker-0"] = 2
    assert list(backend.logs(run, follow=True, node="worker-0")) == [
        f"{run_name}-worker-0: line {n}\n" for n in (1, 2, 3)]
    assert standin.state.log_not_ready[f"{run_name}-worker-0"] == 0
    data = list(backend.logs(run, step="preprocess"))
    assert data == [f"{run_name}-preprocess-x7k2p: line {n}\n" for n in (1, 2, 3)]
    follow_params = [r.query for r in standin.state.requests if r.path.endswith("/log")]
    assert any(q.get("follow") == "true" for q in follow_params)
    with pytest.raises(UnknownNode, match=r"--node .worker-7.: no pod of run .*worker-0, .*worker-1"):
        list(backend.logs(run, node="worker-7"))  # an unknown node names the run's pods, never another's log


def test_cancel_deletes_only_this_runs_objects_and_is_safe_to_repeat(standin, k8s_jobs, tmp_path):
    backend, job, art = _launch(tmp_path, _job_with_data(k8s_jobs))
    run = backend.submit(job, art)
    run_name = names.run_id(art.run_dir)
    s = standin.state
    # Objects that are not ours: another mtk run, and an unlabelled ConfigMap with a look-alike name.
    other = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"{run_name}-spec-copy", "namespace": "default"}, "data": {}}
    neighbour = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                 "metadata": {"name": "someone-else", "namespace": "default",
                              "labels": {names.LABEL_RUN: "someone-else"}}, "spec": {}}
    s.seed(other)
    s.seed(neighbour)
    backend.cancel(run)
    deleted = [(kind, name) for method, kind, name in _writes(s) if method == "DELETE"]
    assert deleted == [("PyTorchJob", run_name), ("Job", f"{run_name}-getdata"), ("Job", f"{run_name}-preprocess"),
                       ("Deployment", f"{run_name}-etcd"), ("Service", f"{run_name}-etcd"),
                       ("NetworkPolicy", f"{run_name}-etcd"), ("NetworkPolicy", f"{run_name}-train"),
                       ("ConfigMap", f"{run_name}-spec")]
    deletes = [r for r in s.requests if r.method == "DELETE"]
    assert all(r.query.get("propagationPolicy") == "Background" for r in deletes)
    # Every DELETE was preceded by a label-selected list for its kind.
    lists = [r.query.get("labelSelector") for r in s.requests if r.method == "GET" and r.name is None
             and r.kind != "Pod"]
    assert set(lists[-5:]) == {f"{names.LABEL_RUN}={run_name}"}
    remaining = {(p, n) for (_, p, n) in s.objects}
    assert remaining == {("configmaps", f"{run_name}-spec-copy"), ("pytorchjobs", "someone-else")}
    # Again: nothing left to delete, no error.
    n = len(deletes)
    backend.cancel(run)
    assert len([r for r in s.requests if r.method == "DELETE"]) == n
    states = backend.status(Run.load(Path(art.run_dir) / "run.json"))
    assert {st.state for st in states} == {"CANCELLED"}


def test_cancel_with_no_pytorchjob_crd_still_cleans_up(standin, k8s_jobs, tmp_path):
    """A cluster without the training operator answers 404 for the pytorchjobs collection."""
    backend, job, art = _launch(tmp_path, k8s_jobs.tiny_eks())
    run = Run(backend="eks", run_dir=art.run_dir, name=job.name,
              extra={"namespace": "default", "run_id": names.run_id(art.run_dir)})
    for obj in yamlio.load_all(art.files["steps/spec.yaml"]):
        standin.state.seed(obj)
    standin.state.missing_plurals.add("pytorchjobs")
    backend.cancel(run)
    assert not standin.state.of_kind("ConfigMap")
    assert any(r.kind == "?" or "pytorchjobs" in r.path for r in standin.state.requests)


def test_missing_operator_is_named(standin, k8s_jobs, tmp_path):
    from mtk.k8s.client import KubeError

    backend, job, art = _launch(tmp_path, k8s_jobs.tiny_eks())
    standin.state.missing_plurals.add("pytorchjobs")
    with pytest.raises(KubeError, match=r"PyTorchJob CRD installed.*training operator"):
        backend.submit(job, art)


def test_no_credentials_message(tmp_path, monkeypatch):
    """Without a kubeconfig the client says what to do instead of a traceback from deep inside."""
    from mtk.k8s.client import Kube, KubeError

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeError, match="KUBECONFIG"):
        Kube("default").get("ConfigMap", "x")


@pytest.mark.parametrize("target", [["-f", "manifests/all.yaml"], ["-f", "manifests"], ["-R", "-f", "manifests"]],
                         ids=["all.yaml", "folder", "folder-R"])
@pytest.mark.parametrize("mode", ["client-side", "server-side"])
def test_kubectl_apply_takes_all_yaml_unchanged(standin, k8s_jobs, tmp_path, mode, target):
    """The real `kubectl apply -f manifests/all.yaml`, or `-f manifests/` (`-R`): discovery, then one create or
    apply per object, each object once, in apply order, against the stand-in; schemas are checked offline by the
    unit tests (kubernetes-validate, CRD)."""
    import shutil
    import subprocess

    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed for this test (Debian: apt-get install kubectl, or kubernetes-client)"
    _, _, art = _launch(tmp_path, _job_with_data(k8s_jobs))
    extra = ["--server-side"] if mode == "server-side" else []
    where = [f"{art.run_dir}/{a}" if a.startswith("manifests") else a for a in target]
    out = subprocess.run([kubectl, "apply", *extra, "--validate=false", *where],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
    rendered = yamlio.load_all(art.files["manifests/all.yaml"])
    writes = [(r.kind, (r.body or {}).get("metadata", {}).get("name") or r.name)
              for r in standin.state.requests if r.method in ("POST", "PATCH")]
    assert writes == [(o["kind"], o["metadata"]["name"]) for o in rendered]
    for o in rendered:
        stored = next(v for (_, _, n), v in standin.state.objects.items()
                      if n == o["metadata"]["name"] and v["kind"] == o["kind"])
        assert stored.get("spec") == o.get("spec") and stored.get("data") == o.get("data")
        assert stored["metadata"]["labels"] == o["metadata"]["labels"]
