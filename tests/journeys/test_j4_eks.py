"""J4, an EKS user: the rendered manifests' commands run as processes with exactly their env, against a real etcd
(tests/support/pod_net.py emulates the pods): getdata downloads the corpus and the tokenizer from an HTTP server
that wants the ``cluster.secrets`` token → the preprocess Indexed Job's 2 pods tokenize it → the PyTorchJob's 2
pods train → one pod is killed → its replacement and the surviving pod resume on an uninterrupted run's losses."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from mtk.k8s import names, yamlio
from mtk.k8s.backend import EksBackend
from mtk.launcher.paths import resolve_paths
from support import operator_env
from support.journey import same_losses, step
from support.journey_local import losses, train_records

from mtk.spec.loader import validate

pytestmark = pytest.mark.integration

TOKEN = "hf_JourneyToken_5e6f7a8b"
ITERS, SAVE = 12, 4
SERVER = "data-server"  # the pod running the file server (reached at the namespace's loopback)
SUPPORT = Path(__file__).resolve().parents[1] / "support"


def _job(fsx: Path, name: str):
    fetch = [{"url": f"http://127.0.0.1:8000/{f}", "path": f, "auth": "HF_TOKEN"}
             for f in ("corpus.jsonl", "vocab.json", "merges.txt")]
    job = validate({
        "name": name, "image": {"registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com", "name": "mtk", "tag": "t"},
        "cluster": {"nodes": 2, "procs_per_node": 1, "device": "cpu", "runs_dir": str(fsx / "runs"),
                    "secrets": ["HF_TOKEN"], "eks": {"fsx_mount": str(fsx), "shm_size": "1Gi"}},
        "model": {"preset": "tiny"}, "parallel": {"tp": 2},
        "train": {"micro_batch_size": 2, "global_batch_size": 4, "iterations": ITERS, "lr": 1e-3, "min_lr": 1e-4,
                  "lr_warmup_iters": 2, "precision": "fp32", "log_interval": 1, "eval_interval": None,
                  "checkpoint": {"save_interval": SAVE}},
        "data": {"dir": str(fsx / "data"), "num_workers": 0, "fetch": fetch,
                 "corpus": {"input": "corpus.jsonl", "output_prefix": "tok/c", "json_keys": ["text"], "shards": 2,
                            "workers": 1, "shard_mb": 0.1},
                 "tokenizer": {"type": "GPT2BPETokenizer", "vocab_file": "vocab.json", "merge_file": "merges.txt"}},
    }, backend="eks")
    return resolve_paths(job, "eks")


def _render(job, run_dir: Path) -> dict[str, dict]:
    objs = yamlio.load_all(EksBackend().render(job, str(run_dir)).files["manifests/all.yaml"])
    return {f'{o["kind"]}:{o["metadata"]["name"]}': o for o in objs}


def _image_env(home: Path) -> dict[str, str]:
    return {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
            "LANG": "C.UTF-8"}


def _container_env(job_obj: dict, secrets: dict[str, str]) -> dict[str, str]:
    """The container's env as the kubelet resolves it: values, and secretKeyRefs from the synced Secret."""
    env = {}
    for e in job_obj["spec"]["template"]["spec"]["containers"][0].get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        env[e["name"]] = secrets[ref["key"]] if ref else e["value"]
    return env


def _run_job_pods(net, job_obj: dict, home: Path, logs: Path, secrets: dict[str, str]) -> list[int]:
    """A batch Job's pods (Indexed: one per completion index, all at once); their exit codes."""
    container = job_obj["spec"]["template"]["spec"]["containers"][0]
    indexed = job_obj["spec"].get("completionMode") == "Indexed"
    pods = []
    for i in range(job_obj["spec"].get("completions") or 1):
        env = {**_image_env(home), **_container_env(job_obj, secrets)}
        if indexed:
            env["JOB_COMPLETION_INDEX"] = str(i)
        name = f"{job_obj['metadata']['name']}-{i}"
        pods.append(net.start_pod(name, env, [*container["command"], *container.get("args", [])],
                                  logs / f"{name}.log"))
    return [p.wait(timeout=600) for p in pods]


def _logs(logs: Path) -> str:
    return "\n".join(f"===== {f.name}\n{f.read_text(errors='replace')[-3000:]}" for f in sorted(logs.glob("*.log")))


def _worker(net, ptj: dict, index: int, home: Path, logs: Path):
    env = {**_image_env(home), **operator_env.worker_pod_env(ptj, index)}
    name = operator_env.worker_pod(ptj["metadata"]["name"], index)
    return net.start_pod(name, env, operator_env.worker_command(ptj), logs / f"{name}.log")


def _train(net, ptj: dict, run_dir: Path, home: Path, logs: Path,
           kill_after: int | None = None) -> tuple[list[int], int | None]:
    """The PyTorchJob's 2 pods; with ``kill_after``, worker-1 is killed once that iteration is logged and
    re-created. Returns the pods' exit codes and the last iteration logged before the kill."""
    pods, killed_at = [_worker(net, ptj, i, home, logs) for i in (0, 1)], None
    if kill_after is not None:
        deadline = time.monotonic() + 600
        while max(losses(run_dir, killed_writer=True), default=0) < kill_after:
            assert time.monotonic() < deadline, "training did not reach the kill point:\n" + _logs(logs)
            assert all(p.poll() is None for p in pods), "a pod ended before the kill:\n" + _logs(logs)
            time.sleep(0.2)
        killed_at = max(losses(run_dir, killed_writer=True))
        net.kill_pod(pods[1])
        assert pods[0].poll() is None, "the surviving pod's agent stays up"
        pods[1] = _worker(net, ptj, 1, home, logs)  # the operator re-creates the pod: same env and command
    return [p.wait(timeout=600) for p in pods], killed_at


def test_j4_getdata_with_secret_indexed_preprocess_two_pods_kill_one_resumes(pod_net_factory, tmp_path):
    from tokenizers import ByteLevelBPETokenizer

    fsx, served, logs = tmp_path / "fsx", tmp_path / "served", tmp_path / "logs"
    served.mkdir()
    logs.mkdir()
    with step("the user's corpus and BPE on an HTTP server that wants the token"):
        import sysconfig

        stdlib = Path(sysconfig.get_paths()["stdlib"])
        docs = [p.read_text(encoding="utf-8", errors="replace")[:8000] for p in sorted(stdlib.glob("*.py"))[:60]]
        (served / "corpus.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator(docs, vocab_size=1500, special_tokens=["<|endoftext|>"], show_progress=False)
        tok.save_model(str(served))
        # The reference is its own job (its own checkpoint dir) on the same data dir.
        run_dir, ref_dir = fsx / "runs" / "j4-20261124-000001", fsx / "runs" / "j4ref-20261124-000002"
        objs, ref_objs = _render(_job(fsx, "j4"), run_dir), _render(_job(fsx, "j4ref"), ref_dir)
        ptj, ref_ptj = (next(o for k, o in d.items() if k.startswith("PyTorchJob:")) for d in (objs, ref_objs))
        hosts = {SERVER: "127.0.0.1"}
        for i, p in enumerate((ptj, ref_ptj)):  # each job's pods get their own addresses
            pods = {operator_env.worker_pod(p["metadata"]["name"], w): f"127.0.{i + 1}.{w + 1}" for w in (0, 1)}
            hosts.update(pods)
            # c10d (the default): the rendezvous Service names worker 0's pod; etcd: the etcd Service (loopback)
            policy = p["spec"]["elasticPolicy"]
            first = operator_env.worker_pod(p["metadata"]["name"], 0)
            hosts[policy["rdzvHost"]] = pods[first] if policy["rdzvBackend"] == "c10d" else "127.0.0.1"
        net = pod_net_factory(hosts)
        net.put_spec(next(o for k, o in objs.items() if k.startswith("ConfigMap:"))["data"][names.SPEC_KEY])
        seen = tmp_path / "seen.txt"
        net.start_pod(SERVER, {**_image_env(tmp_path), "SERVE_TOKEN": TOKEN},
                      [sys.executable, str(SUPPORT / "token_http.py"), str(served), "8000", str(seen)],
                      logs / "server.log")
        deadline = time.monotonic() + 60
        while "serving" not in (logs / "server.log").read_text():
            assert time.monotonic() < deadline, _logs(logs)
            time.sleep(0.1)

    secrets = {"HF_TOKEN": TOKEN}  # what sync_secrets puts in the Secret the pods' secretKeyRefs name
    with step("getdata Job downloads with the secret's token"):
        getdata = next(o for k, o in objs.items() if k.endswith("-getdata"))
        assert _run_job_pods(net, getdata, tmp_path, logs, secrets) == [0], _logs(logs)
        for f in ("corpus.jsonl", "vocab.json", "merges.txt"):
            assert (fsx / "data" / f).read_bytes() == (served / f).read_bytes(), f
        assert seen.read_text().split("\n")[:-1] == [f"/{f} token" for f in ("corpus.jsonl", "vocab.json",
                                                                           "merges.txt")], seen.read_text()

    with step("preprocess Indexed Job: 2 pods, one merged dataset"):
        pre = next(o for k, o in objs.items() if k.endswith("-preprocess"))
        assert pre["spec"]["completionMode"] == "Indexed" and pre["spec"]["completions"] == 2
        assert _run_job_pods(net, pre, tmp_path, logs, secrets) == [0, 0], _logs(logs)
        assert (fsx / "data" / "tok" / "c_text_document.idx").exists(), _logs(logs)

    with step("train 2 pods uninterrupted (reference)"):
        net.put_spec(next(o for k, o in ref_objs.items() if k.startswith("ConfigMap:"))["data"][names.SPEC_KEY])
        assert _train(net, ref_ptj, ref_dir, tmp_path, logs)[0] == [0, 0], _logs(logs)
        reference = losses(ref_dir)
        assert sorted(reference) == list(range(1, ITERS + 1)), reference
        ref_logs = "".join(f.read_text(errors="replace") for f in logs.glob("j4ref-*-worker-*.log"))
        # Really the etcd-v2 rendezvous at the Service name, with both pods in one world of 2.
        policy = ref_ptj["spec"]["elasticPolicy"]  # c10d by default: worker 0's store behind the rdzv Service
        # torch's c10d through mtk's staggered backend: worker 1 joins each round 25 ms after it is ready
        rdzv = f"--rdzv-backend mtk-c10d --rdzv-endpoint {policy['rdzvHost']}:{policy['rdzvPort']}"
        assert policy["rdzvBackend"] == "c10d"
        assert "mtk: node index 1 joins the rendezvous round in 0.025 s" in ref_logs, _logs(logs)
        assert rdzv in ref_logs and operator_env.worker_pod(ref_ptj["metadata"]["name"], 1) in ref_logs, _logs(logs)

    with step("train 2 pods, kill one after a checkpoint, the replacement resumes on the same losses"):
        net.put_spec(next(o for k, o in objs.items() if k.startswith("ConfigMap:"))["data"][names.SPEC_KEY])
        codes, killed_at = _train(net, ptj, run_dir, tmp_path, logs, kill_after=SAVE + 2)
        assert codes == [0, 0], _logs(logs)
        workers = "".join(f.read_text(errors="replace") for f in logs.glob("j4-*-worker-*.log"))
        assert f"[checkpoint] resumed from {fsx}/runs/j4/checkpoints/iter_" in workers, _logs(logs)
        records = train_records(run_dir, killed_writer=True)
        restarted = [i for i, r in records.items() if r.get("restart_count", 0) >= 1]
        assert restarted, "no iteration was logged by the restarted worker group:\n" + _logs(logs)
        resumed_from = min(restarted) - 1  # the latest checkpoint before the kill, exactly
        assert killed_at is not None and resumed_from >= killed_at - SAVE, (killed_at, resumed_from)  # no older one
        assert resumed_from % SAVE == 0 and f"at iteration {resumed_from}," in workers, (resumed_from, _logs(logs))
        resumed = {i: r["lm_loss"] for i, r in records.items()}
        assert same_losses(resumed, reference), (resumed, reference)
    with step("the token is in no file the run wrote"):
        written = [f for f in fsx.rglob("*") if f.is_file() and "data" not in f.relative_to(fsx).parts[:1]]
        assert written and not [f for f in written if TOKEN in f.read_text(errors="replace")]
