"""Rendered PyTorchJob worker pods, run as two processes with exactly their env and command (plus the
PET_* variables operator v1.9.0 injects), rendezvous through a real etcd (v2 API) and train the tiny model.

Each "pod" gets its own pid and UTS namespace (hostname = pod name, as the operator names it) inside a shared
private network namespace in which the etcd Service name resolves and /etc/mtk/job.json is the ConfigMap.
"""

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

pytestmark = pytest.mark.integration

ITERATIONS = 20
SAVE_INTERVAL = 4


def _render(k8s_jobs, root: Path, stamp: str):
    fsx = root / "fsx"
    job = k8s_jobs.tiny_eks(cluster={"runs_dir": str(fsx / "runs"), "eks": {"fsx_mount": str(fsx)}},
                            data={"dir": str(fsx / "data")},
                            train={"iterations": ITERATIONS, "global_batch_size": 2,
                                   "checkpoint": {"save_interval": SAVE_INTERVAL}})
    job = resolve_paths(job, "eks")
    run_dir = str(fsx / "runs" / f"tiny-eks-{stamp}")
    art = EksBackend().render(job, run_dir)
    objs = yamlio.load_all(art.files["manifests/all.yaml"])
    ptj = next(o for o in objs if o["kind"] == "PyTorchJob")
    spec_text = next(o for o in objs if o["kind"] == "ConfigMap")["data"][names.SPEC_KEY]
    return run_dir, ptj, spec_text


def _image_env(home: Path) -> dict[str, str]:
    """What the container image itself provides (PATH to python and mtk-entrypoint, HOME, locale)."""
    bindir = os.path.dirname(sys.executable)
    return {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def _start(net, ptj, index: int, home: Path, logs: Path):
    env = {**_image_env(home), **operator_env.worker_pod_env(ptj, index)}
    hostname = names.worker_pod(ptj["metadata"]["name"], index)
    return net.start_pod(hostname, env, operator_env.worker_command(ptj), logs / f"{hostname}.log")


def _hosts(ptj) -> dict[str, str]:
    name = ptj["metadata"]["name"]
    return {ptj["spec"]["elasticPolicy"]["rdzvHost"]: "127.0.0.1",
            names.worker_pod(name, 0): "127.0.1.1", names.worker_pod(name, 1): "127.0.1.2"}


def _train_records(run_dir: str) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "train":
            out.append(rec)
    return out


def _wait(pods, timeout: float, logs: Path) -> list[int]:
    deadline = time.time() + timeout
    for pod in pods:
        remaining = max(1.0, deadline - time.time())
        try:
            pod.wait(timeout=remaining)
        except Exception:
            for p in pods:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
            raise AssertionError("pods did not finish in time:\n" + _logs(logs)) from None
    return [p.returncode for p in pods]


def _logs(logs: Path) -> str:
    return "\n".join(f"===== {f.name}\n{f.read_text(errors='replace')[-4000:]}" for f in sorted(logs.glob("*.log")))


def test_two_rendered_pods_rendezvous_through_etcd_and_train(k8s_jobs, pod_net_factory, tmp_path):
    run_dir, ptj, spec_text = _render(k8s_jobs, tmp_path, "20261122-000001")
    net = pod_net_factory(_hosts(ptj))
    net.put_spec(spec_text)
    logs = tmp_path / "logs"
    logs.mkdir()
    pods = [_start(net, ptj, i, tmp_path, logs) for i in (0, 1)]
    codes = _wait(pods, 300, logs)
    assert codes == [0, 0], _logs(logs)
    recs = _train_records(run_dir)
    iters = [r["iteration"] for r in recs]
    assert iters and max(iters) == ITERATIONS >= 20, _logs(logs)
    losses = [r["lm_loss"] for r in recs]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, losses
    text = _logs(logs)
    # Really the etcd-v2 rendezvous at the Service name, with both pods in one world of 2.
    assert f"--rdzv-backend etcd-v2 --rdzv-endpoint {ptj['spec']['elasticPolicy']['rdzvHost']}:2379" in text
    assert names.worker_pod(ptj["metadata"]["name"], 1) in text


def test_killed_pod_is_replaced_and_training_resumes_from_checkpoint(k8s_jobs, pod_net_factory, tmp_path):
    run_dir, ptj, spec_text = _render(k8s_jobs, tmp_path, "20261122-000002")
    net = pod_net_factory(_hosts(ptj))
    net.put_spec(spec_text)
    logs = tmp_path / "logs"
    logs.mkdir()
    pods = [_start(net, ptj, i, tmp_path, logs) for i in (0, 1)]
    # Let training pass at least two checkpoints, then kill worker-1's whole process tree.
    deadline = time.time() + 240
    while time.time() < deadline:
        recs = _train_records(run_dir)
        if recs and recs[-1]["iteration"] >= 2 * SAVE_INTERVAL + 1:
            break
        if any(p.poll() is not None for p in pods):
            raise AssertionError("a pod ended before the kill:\n" + _logs(logs))
        time.sleep(0.2)
    else:
        raise AssertionError("training did not reach the kill point:\n" + _logs(logs))
    killed_at = _train_records(run_dir)[-1]["iteration"]
    net.kill_pod(pods[1])
    assert pods[0].poll() is None, "the surviving pod's agent must stay up and restart its workers"
    # The operator (OnFailure / pod re-creation) starts worker-1 again with the same env and command.
    replacement = _start(net, ptj, 1, tmp_path, logs)
    codes = _wait([pods[0], replacement], 300, logs)
    assert codes == [0, 0], _logs(logs)
    recs = _train_records(run_dir)
    assert recs[-1]["iteration"] == ITERATIONS, _logs(logs)
    after = [r for r in recs if r.get("restart_count", 0) >= 1]
    assert after, "no iteration was logged by the restarted worker group:\n" + _logs(logs)
    resumed_from = after[0]["iteration"] - 1
    assert killed_at - SAVE_INTERVAL <= resumed_from <= killed_at, (killed_at, resumed_from)
    assert resumed_from % SAVE_INTERVAL == 0, "resumes exactly at a saved checkpoint"
    full = "".join(f.read_text(errors="replace") for f in sorted(logs.glob("*.log")))
    assert f"at iteration {resumed_from}," in full and "[checkpoint] resumed from" in full, _logs(logs)
