"""A launch never takes over another run's objects (issue 51, item 6's review).

The run id — the ``mtk/run`` label and every object's name — comes from the run dir's name, so ``/fsx/teamA/exp1``
and ``/fsx/teamB/exp1`` share one, and server-side apply with ``force`` would hand the first run's objects (its job
spec ConfigMap, read by its pods) to the second launch. Against the API-server STAND-IN with the real Kubernetes
client: the second launch is refused in one line naming the first run's dir and the fix, exit 2, before any write —
the cluster's objects and the first run's local record stay as they were — while the same run dir launched again
re-applies its own objects; names that differ only where they are made DNS labels get ids of their own; an object
of that name made by hand is not taken over either; and of two launches racing for one run id, the one that loses
the spec ConfigMap's create is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mtk.k8s import names
from mtk.k8s.backend import EksBackend
from mtk.k8s.client import Kube
from mtk.k8s.ownership import RunTaken

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk.launcher.cli", *args], cwd=cwd, env=os.environ.copy(),
                          capture_output=True, text=True, timeout=180)


def _snapshot(state) -> str:
    with state.lock:
        return json.dumps({"/".join(k): v for k, v in state.objects.items()}, sort_keys=True)


def _writes(state, since: int = 0) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in state.requests[since:] if r.method != "GET"]


def test_a_second_run_dir_of_the_same_name_is_refused_and_the_first_runs_objects_are_untouched(standin, tmp_path):
    standin.state.ready_after = 1
    fsx = tmp_path / "fsx"
    sets = ["--set", "image.registry=123456789012.dkr.ecr.us-west-2.amazonaws.com", "--set", "cluster.nodes=2",
            "--set", "cluster.procs_per_node=1", "--set", f"data.dir={fsx}/data",
            "--set", f"cluster.eks.fsx_mount={fsx}", "--set", "cluster.eks.operator=pytorchjob"]
    team_a, team_b = fsx / "teamA" / "exp1", fsx / "teamB" / "exp1"

    def launch(run_dir: Path) -> subprocess.CompletedProcess:
        return _mtk("launch", str(REPO / "examples" / "tiny.yaml"), "--backend", "eks", "--run-dir", str(run_dir),
                    "--no-megatron-check", "--set", f"cluster.runs_dir={run_dir.parent}", *sets, cwd=tmp_path)

    first = launch(team_a)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "train: PyTorchJob/exp1" in first.stdout
    spec = standin.state.objects[("default", "configmaps", "exp1-spec")]
    assert names.owner(spec) == str(team_a)
    before, n = _snapshot(standin.state), len(standin.state.requests)
    record = tmp_path / "runs" / "exp1"  # where the launching machine keeps the run's files: one name for both
    record_before = {p.name: p.read_bytes() for p in record.iterdir() if p.is_file()}

    second = launch(team_b)
    assert second.returncode == 2, second.stdout + second.stderr
    (line,) = second.stderr.strip().splitlines()
    assert f"belongs to the run in {team_a}, not to this one ({team_b})" in line, line
    assert "run id exp1" in line and "give this run dir another name" in line and "Traceback" not in line
    assert not _writes(standin.state, n), "nothing was applied, created or deleted"
    assert _snapshot(standin.state) == before, "the first run's objects are as they were"
    assert {p.name: p.read_bytes() for p in record.iterdir() if p.is_file()} == record_before, \
        "the first run's local record was not overwritten"

    again = launch(team_a)  # the same run dir again: its own objects, applied over
    assert again.returncode == 0, again.stdout + again.stderr
    assert ("PATCH", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/exp1") in _writes(standin.state, n)
    assert names.owner(standin.state.objects[("default", "configmaps", "exp1-spec")]) == str(team_a)


def _render(job, run_dir: str):
    backend = EksBackend(poll=0.01, say=lambda msg: None)
    art = backend.render(job, run_dir)
    art.write()
    return backend, art


def test_run_dir_names_that_differ_get_run_ids_of_their_own(standin, k8s_jobs, tmp_path):
    job = k8s_jobs.tiny_eks()
    dirs = [str(tmp_path / "runs" / name) for name in ("Exp_1", "exp-1", "exp.1")]
    ids = [names.run_id(d) for d in dirs]
    assert ids[1] == "exp-1" and len(set(ids)) == 3, ids  # a name that is a DNS label already stays as it is
    for run_dir in dirs:
        backend, art = _render(job, run_dir)
        assert backend.launch_problems(job, run_dir) == []
        backend.submit(job, art, {"wait": False})
    for run_dir, run in zip(dirs, ids, strict=True):
        assert names.owner(standin.state.objects[("default", "pytorchjobs", run)]) == run_dir


def test_an_object_of_that_name_made_by_hand_is_not_taken_over(standin, k8s_jobs, tmp_path):
    job = k8s_jobs.tiny_eks()
    run_dir = str(tmp_path / "runs" / "exp1")
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "exp1-spec", "namespace": "default"},
              "data": {"team": "b"}}
    standin.state.seed(theirs)
    backend, art = _render(job, run_dir)
    with pytest.raises(RunTaken, match=r"ConfigMap/exp1-spec in namespace default records no mtk run dir") as err:
        backend.launch_problems(job, run_dir)
    assert err.value.exit_code == 2
    with pytest.raises(RunTaken):  # submit looks again itself: a caller that skips the launch's checks
        backend.submit(job, art)
    assert not _writes(standin.state)
    assert standin.state.objects[("default", "configmaps", "exp1-spec")] == theirs


def test_objects_of_an_older_launch_that_recorded_no_run_dir_are_refused_and_a_controllers_are_not(
        standin, k8s_jobs, tmp_path):
    """Labelled with the run id but no run dir: whose they are is unknown, so they are not taken over. What a
    controller made for one of the run's objects (``ownerReferences``: the operator's per-replica Services) is
    judged by that object, so it never stands in the way of a relaunch."""
    job = k8s_jobs.tiny_eks()
    run_dir = str(tmp_path / "runs" / "exp1")
    backend, art = _render(job, run_dir)
    backend.submit(job, art, {"wait": False})
    standin.state.seed({"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "exp1-worker-0", "namespace": "default", "labels": {names.LABEL_RUN: "exp1"},
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "exp1", "uid": "u1"}]}})
    assert backend.launch_problems(job, run_dir) == []
    backend.submit(job, art, {"wait": False})
    old = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": "exp1-etcd", "namespace": "default", "labels": names.labels("exp1", "etcd")}, "spec": {}}
    standin.state.seed(old)
    with pytest.raises(RunTaken, match=r"Deployment/exp1-etcd in namespace default records no mtk run dir"):
        backend.launch_problems(job, run_dir)


class RacingKube(Kube):
    """The other launch wins the race: its spec ConfigMap appears between this launch's look-up and its create."""

    def __init__(self, namespace: str, state, theirs: dict):
        super().__init__(namespace)
        self.state, self.theirs = state, theirs

    def create(self, body: dict) -> dict:
        self.state.seed(self.theirs)
        return super().create(body)


def test_of_two_launches_racing_for_one_run_id_the_one_that_loses_the_create_is_refused(standin, k8s_jobs, tmp_path):
    job = k8s_jobs.tiny_eks()
    mine, other = str(tmp_path / "teamB" / "exp1"), str(tmp_path / "teamA" / "exp1")
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "exp1-spec", "namespace": "default", "labels": names.labels("exp1", "spec"),
        "annotations": {names.ANNOTATION_RUN_DIR: other}}, "data": {"job.json": "{}"}}
    backend = EksBackend(kube_factory=lambda ns: RacingKube(ns, standin.state, theirs), say=lambda msg: None)
    art = backend.render(job, mine)
    art.write()
    with pytest.raises(RunTaken, match=f"belongs to the run in {other}, not to this one"):
        backend.submit(job, art)
    assert [(r.method, r.kind) for r in standin.state.requests if r.method != "GET"] == [("POST", "ConfigMap")]
    assert standin.state.objects[("default", "configmaps", "exp1-spec")] == theirs
