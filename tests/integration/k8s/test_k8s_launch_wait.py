"""`mtk launch --backend eks` waiting: a progress line per step change, --no-wait, --timeout, Ctrl-C and a failed
data Job — through the real Kubernetes Python client against the API-server STAND-IN (apiserver_standin.py: its
tiny controllers finish a Job after a few reads, or hold it active, or fail it; no real API server runs here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mtk.k8s import names, yamlio
from mtk.k8s.backend import EksBackend, SubmitError
from mtk.k8s.launch_wait import WAIT_TIMEOUT, StoppedWaiting, parse_duration

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
FETCH = [{"url": "https://example.com/c.jsonl", "path": "c.jsonl"},
         {"url": "https://example.com/t.json", "path": "t.json"}]
ORDER = ["ConfigMap", "NetworkPolicy", "Service", "Deployment", "Job", "Job", "NetworkPolicy", "PyTorchJob"]


def _data(shards: int = 1) -> dict:
    corpus = {"input": "c.jsonl", "output_prefix": "tok/c"}
    if shards > 1:
        corpus.update(shards=shards, workers=1)
    return {"fetch": FETCH, "corpus": corpus, "tokenizer": {"type": "HuggingFaceTokenizer", "model": "t.json"},
            "blend": [{"prefix": "tok/c_text_document"}]}


def _render(tmp_path: Path, job, lines: list[str]):
    backend = EksBackend(poll=0.01, say=lines.append)
    art = backend.render(job, str(tmp_path / "tiny-eks-20261124-010203"))
    art.write()
    return backend, art, names.run_id(art.run_dir)


def _patched(state) -> list[str]:
    return [r.kind for r in state.requests if r.method == "PATCH"]


def test_wait_prints_one_line_per_step_change_and_returns_when_training_runs(standin, k8s_jobs, tmp_path):
    standin.state.ready_after = 3
    lines: list[str] = []
    backend, art, run = _render(tmp_path, k8s_jobs.tiny_eks(data=_data(shards=2)), lines)
    backend.submit(k8s_jobs.tiny_eks(data=_data(shards=2)), art)
    progress = [line for line in lines if not line.startswith("applied ")]
    elapsed = re.compile(r" \((\d+m)?\d+s\)")
    shapes = [elapsed.sub("", line) for line in progress]
    assert shapes == [
        f"etcd: deployment/{run}-etcd PENDING ready=0/1",
        f"etcd: deployment/{run}-etcd RUNNING ready=1/1",
        f"getdata: job/{run}-getdata RUNNING active=1 succeeded=0/1 failed=0",
        f"getdata: job/{run}-getdata COMPLETED active=0 succeeded=1/1 failed=0: Completed",
        # the sharded preprocess is an Indexed Job: its completions are counted
        f"preprocess: job/{run}-preprocess RUNNING active=2 succeeded=0/2 failed=0",
        f"preprocess: job/{run}-preprocess COMPLETED active=0 succeeded=2/2 failed=0: Completed",
        f"train: pytorchjob/{run} RUNNING pods running=2: PyTorchJobRunning",
    ], progress
    assert all(elapsed.search(line) for line in progress), "every line says how long the step has taken"
    # Each step is applied only once the one before is done, so training pods hold no nodes during data prep.
    assert _patched(standin.state) == ORDER
    assert lines.index(f"applied PyTorchJob/{run}") > lines.index(progress[5])


def test_no_wait_submits_every_step_at_once_and_each_waits_in_the_cluster(standin, k8s_jobs, tmp_path):
    standin.state.hold_jobs.add("tiny-eks-20261124-010203-getdata")  # a download that takes hours
    lines: list[str] = []
    job = k8s_jobs.tiny_eks(data=_data())
    backend, art, run = _render(tmp_path, job, lines)
    out = backend.submit(job, art, {"wait": False})
    assert out.ids["train"] == f"PyTorchJob/{run}"
    assert _patched(standin.state) == ORDER
    reqs = standin.state.requests
    first_write = next(i for i, r in enumerate(reqs) if r.method != "GET")  # the reads before: whose the run id is
    assert not [r for r in reqs[first_write:] if r.method == "GET"], "nothing was waited for"
    # What makes that safe: preprocess waits for getdata's files, training for preprocess's, on the shared volume.
    objs = {o["kind"] + "/" + o["metadata"]["labels"][names.LABEL_COMPONENT]: o
            for o in yamlio.load_all(art.files["manifests/all.yaml"])}
    pre = objs["Job/preprocess"]["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert pre[4:] == ["/fsx/data/c.jsonl", "/fsx/data/t.json"] and "getdata Job" in pre[2]
    train = objs["PyTorchJob/train"]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"]
    assert train[0]["command"][4:] == [f"{art.run_dir}/state/data-ready.json"] and "preprocess Job" in train[0][
        "command"][2], "this run's marker, written after the merge and its index cache, not the .bin/.idx"


def test_getdata_only_training_waits_for_the_fetched_files(k8s_jobs, tmp_path):
    job = k8s_jobs.tiny_eks(data={"fetch": FETCH})
    assert "getdata" in job.steps() and "preprocess" not in job.steps()
    art = EksBackend().render(job, "/fsx/runs/tiny-eks-1")
    ptj = next(o for o in yamlio.load_all(art.files["manifests/all.yaml"]) if o["kind"] == "PyTorchJob")
    init = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"][0]
    assert init["command"][4:] == ["/fsx/data/c.jsonl", "/fsx/data/t.json"]
    assert not any("does not wait" in note for note in art.notes)


def test_timeout_stops_waiting_not_the_run(standin, k8s_jobs, tmp_path):
    standin.state.hold_jobs.add("tiny-eks-20261124-010203-preprocess")
    lines: list[str] = []
    job = k8s_jobs.tiny_eks(data=_data())
    backend, art, run = _render(tmp_path, job, lines)
    with pytest.raises(StoppedWaiting) as stop:
        backend.submit(job, art, {"timeout": 0.5})
    assert stop.value.exit_code == WAIT_TIMEOUT
    assert "stopped waiting after 0s (--timeout): preprocess is RUNNING active=1 succeeded=0/1" in str(stop.value)
    assert stop.value.run is not None and stop.value.run.ids["train"] == f"PyTorchJob/{run}"
    assert _patched(standin.state) == ORDER, "the rest is submitted: the run goes on"
    assert f"applied PyTorchJob/{run}" in lines


def test_ctrl_c_while_waiting_submits_the_rest(standin, k8s_jobs, tmp_path):
    standin.state.hold_jobs.add("tiny-eks-20261124-010203-getdata")
    job = k8s_jobs.tiny_eks(data=_data())

    def say(line: str) -> None:
        if line.startswith("getdata:"):
            raise KeyboardInterrupt

    backend = EksBackend(poll=0.01, say=say)
    art = backend.render(job, str(tmp_path / "tiny-eks-20261124-010203"))
    art.write()
    with pytest.raises(StoppedWaiting, match=r"Ctrl-C") as stop:
        backend.submit(job, art)
    assert stop.value.exit_code == 130 and _patched(standin.state) == ORDER


def test_failed_indexed_preprocess_names_it_with_its_failed_pods_logs(standin, k8s_jobs, tmp_path):
    lines: list[str] = []
    job = k8s_jobs.tiny_eks(data=_data(shards=2))
    backend, art, run = _render(tmp_path, job, lines)
    standin.state.fail_jobs.add(f"{run}-preprocess")
    with pytest.raises(SubmitError) as err:
        backend.submit(job, art)
    msg = str(err.value)
    assert f"preprocess Job {run}-preprocess failed: Job has reached the specified backoff limit" in msg
    assert f"[{run}-preprocess-x7k2p] {run}-preprocess-x7k2p: line 3" in msg
    assert "PyTorchJob" not in _patched(standin.state)
    assert any(line.startswith(f"preprocess: job/{run}-preprocess FAILED") for line in lines)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200),
                                               ("1h30m", 5400), ("1d", 86400), ("0.5s", 0.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10x", "-5", "1h 30m", "m"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match=rf"^{re.escape(repr(text))} is not a duration: use e.g. 90s, 30m, 2h"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0", "0s", "0m0s"])
def test_zero_durations_are_refused(text):
    with pytest.raises(ValueError, match=rf"^{re.escape(repr(text))}: a timeout must be longer than zero"):
        parse_duration(text)


# ------------------------------------------------------------------------------------------ the real CLI
def _mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk.launcher.cli", *args], cwd=cwd, env=os.environ.copy(),
                          capture_output=True, text=True, timeout=180)


def _job_file(tmp_path: Path, k8s_jobs) -> Path:
    data = dict(k8s_jobs.TINY_EKS, data={"dir": f"{tmp_path}/fsx/data", **_data()})
    data["cluster"] = {**data["cluster"], "runs_dir": f"{tmp_path}/fsx/runs",
                       "eks": {**data["cluster"]["eks"], "fsx_mount": f"{tmp_path}/fsx"}}
    path = tmp_path / "job.yaml"
    path.write_text(yamlio.dump_all([data]))
    return path


def _launch(tmp_path: Path, k8s_jobs, *flags: str) -> subprocess.CompletedProcess:
    run_dir = tmp_path / "fsx" / "runs" / "tiny-eks-20261124-020304"
    return _mtk("launch", str(_job_file(tmp_path, k8s_jobs)), "--backend", "eks", "--run-dir", str(run_dir),
                "--no-megatron-check", *flags, cwd=tmp_path)


def test_cli_waits_by_default_with_progress_on_stderr(standin, k8s_jobs, tmp_path):
    standin.state.ready_after = 1  # every step done at its first read: the CLI's 5 s poll never sleeps
    out = _launch(tmp_path, k8s_jobs)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"mtk: preprocess: job/tiny-eks-20261124-020304-preprocess COMPLETED .*succeeded=1/1",
                     out.stderr)
    assert "mtk: train: pytorchjob/tiny-eks-20261124-020304 RUNNING pods running=2" in out.stderr
    assert "train: PyTorchJob/tiny-eks-20261124-020304" in out.stdout


def test_cli_no_wait_returns_at_once_and_says_how_to_follow(standin, k8s_jobs, tmp_path):
    standin.state.hold_jobs.add("tiny-eks-20261124-020304-getdata")
    out = _launch(tmp_path, k8s_jobs, "--no-wait")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not waiting (--no-wait): every step is submitted" in out.stderr
    assert "mtk status tiny-eks-20261124-020304" in out.stderr and "mtk logs -f tiny-eks-20261124-020304" in out.stderr
    assert _patched(standin.state) == ORDER
    # What the user is told to run works: status from the launching directory shows the held getdata.
    status = _mtk("status", "tiny-eks-20261124-020304", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert re.search(r"getdata\s+RUNNING", status.stdout)


def test_cli_timeout_exits_124_with_the_command_to_keep_following(standin, k8s_jobs, tmp_path):
    standin.state.ready_after = 1
    standin.state.hold_jobs.add("tiny-eks-20261124-020304-getdata")
    out = _launch(tmp_path, k8s_jobs, "--timeout", "1s")
    assert out.returncode == WAIT_TIMEOUT, out.stdout + out.stderr
    assert "stopped waiting after 1s (--timeout): getdata is RUNNING" in out.stderr
    assert "the run goes on" not in out.stdout and "mtk status tiny-eks-20261124-020304" in out.stderr
    assert _patched(standin.state) == ORDER
    assert (tmp_path / "runs" / "tiny-eks-20261124-020304" / "run.json").is_file()


def test_cli_failed_data_job_exits_1_with_name_and_log(standin, k8s_jobs, tmp_path):
    standin.state.ready_after = 1
    standin.state.fail_jobs.add("tiny-eks-20261124-020304-getdata")
    out = _launch(tmp_path, k8s_jobs)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "getdata Job tiny-eks-20261124-020304-getdata failed" in out.stderr
    assert "tiny-eks-20261124-020304-getdata-x7k2p: line 3" in out.stderr and "Traceback" not in out.stderr
    assert "PyTorchJob" not in _patched(standin.state)


@pytest.mark.parametrize(("flags", "message"), [
    (["--timeout", "soon"], "is not a duration"),
    (["--no-wait", "--timeout", "5m"], "--timeout bounds --wait"),
])
def test_cli_refuses_bad_wait_flags_before_any_request(standin, k8s_jobs, tmp_path, flags, message):
    out = _launch(tmp_path, k8s_jobs, *flags)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not standin.state.requests


def test_cli_wait_flags_are_refused_off_eks(tmp_path):
    out = _mtk("launch", str(REPO / "examples" / "tiny.yaml"), "--no-wait", "--dry-run", cwd=tmp_path)
    assert out.returncode == 2 and "follow the steps of an EKS launch" in out.stderr, out.stderr


def test_failed_pytorchjob_stops_the_wait(standin, k8s_jobs, tmp_path):
    lines: list[str] = []
    job = k8s_jobs.tiny_eks()
    backend, art, run = _render(tmp_path, job, lines)
    ptj = next(o for o in yamlio.load_all(art.files["manifests/all.yaml"]) if o["kind"] == "PyTorchJob")
    ptj["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
                                     "message": "worker-0 exited with code 1"}]}
    standin.state.seed(ptj)  # e.g. a relaunch of a run whose training already failed: apply keeps the status
    with pytest.raises(SubmitError, match=rf"training PyTorchJob {run} failed: PyTorchJobFailed: worker-0 exited"):
        backend.submit(job, art)
    assert any(line.startswith(f"train: pytorchjob/{run} FAILED") for line in lines)


def test_pending_training_pods_say_why():
    from mtk.k8s.launch_wait import pytorchjob_snapshot

    ptj = {"metadata": {"name": "r"}, "status": {"conditions": [
        {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}]}}
    pods = [{"status": {"phase": "Pending", "containerStatuses": [
                {"state": {"waiting": {"reason": "ImagePullBackOff"}}}]}},
            {"status": {"phase": "Pending", "initContainerStatuses": [
                {"state": {"waiting": {"reason": "PodInitializing"}}}]}},
            {"status": {"phase": "Running"}}]
    snap = pytorchjob_snapshot(ptj, pods)
    assert snap.line(65) == ("train: pytorchjob/r PENDING pods pending=2 running=1 (1m05s): PyTorchJobCreated; "
                             "pods waiting: ImagePullBackOff")
