"""Rendered PyTorchJob worker pods, run as two processes with exactly their env and command (plus the
PET_* variables operator v1.9.0 injects), rendezvous through a real etcd (v2 API) and train the tiny model.

The plain paths (two pods rendezvous and train; a killed pod's replacement resumes) are J4's steps
(tests/journeys/test_j4_eks.py), on a real corpus and tokenizer; this module keeps the hang path.

Each "pod" gets its own pid and UTS namespace (hostname = pod name, as the operator names it) inside a shared
private network namespace in which the etcd Service name resolves and /etc/mtk/job.json is the ConfigMap.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import pytest
from mtk.k8s import names, yamlio
from mtk.k8s.backend import EksBackend
from mtk.launcher.paths import resolve_paths
from support import operator_env
from support.journey_local import losses as run_losses

pytestmark = pytest.mark.integration

ITERATIONS = 20
SAVE_INTERVAL = 4


def _job(k8s_jobs, root: Path, iterations: int = ITERATIONS, **sections):
    fsx = root / "fsx"
    job = k8s_jobs.tiny_eks(cluster={"runs_dir": str(fsx / "runs"), "eks": {"fsx_mount": str(fsx)}},
                            data={"dir": str(fsx / "data")},
                            train={"iterations": iterations, "global_batch_size": 2,
                                   "checkpoint": {"save_interval": SAVE_INTERVAL}}, **sections)
    return resolve_paths(job, "eks")


def _manifests(job, run_dir: str):
    art = EksBackend().render(job, run_dir)
    objs = yamlio.load_all(art.files["manifests/all.yaml"])
    ptj = next(o for o in objs if o["kind"] == "PyTorchJob")
    spec_text = next(o for o in objs if o["kind"] == "ConfigMap")["data"][names.SPEC_KEY]
    return ptj, spec_text


def _image_env(home: Path) -> dict[str, str]:
    """What the container image itself provides (PATH to python and mtk-entrypoint, HOME, locale)."""
    bindir = os.path.dirname(sys.executable)
    return {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def _start(net, ptj, index: int, home: Path, logs: Path, extra_env: dict[str, str] | None = None):
    env = {**_image_env(home), **operator_env.worker_pod_env(ptj, index), **(extra_env or {})}
    hostname = operator_env.worker_pod(ptj["metadata"]["name"], index)
    return net.start_pod(hostname, env, operator_env.worker_command(ptj), logs / f"{hostname}.log")


def _hosts(ptj) -> dict[str, str]:
    name = ptj["metadata"]["name"]
    return {ptj["spec"]["elasticPolicy"]["rdzvHost"]: "127.0.0.1",
            operator_env.worker_pod(name, 0): "127.0.1.1", operator_env.worker_pod(name, 1): "127.0.1.2"}


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


# Test-only: the one rank in the pod whose environment names MTK_TEST_STOP_MARK SIGSTOPs itself once, before
# iteration 7 (after the checkpoint at 4), however fast the machine is; the marker keeps the restart going.
SELF_STOP_HOOK = """\
import os

if os.environ.get("LOCAL_RANK") is not None and os.environ.get("MTK_TEST_STOP_MARK"):
    import signal

    import mtk.training.loop as _loop

    _original = _loop.Trainer.train_step

    def _train_step(self):
        mark = os.environ["MTK_TEST_STOP_MARK"]
        if self.iteration == 6 and not os.path.exists(mark):
            with open(mark, "w") as fh:
                fh.write(os.environ["RANK"])
            os.kill(os.getpid(), signal.SIGSTOP)
        return _original(self)

    _loop.Trainer.train_step = _train_step
"""
HANG_ITERATIONS = 12
STEP_TIMEOUT = 15


def _node(name: str) -> dict[str, str]:
    """The downward API's spec.nodeName (MTK_NODE_NAME): the node the scheduler put the pod on."""
    return {"MTK_NODE_NAME": name}


def test_hung_pod_is_detected_its_node_avoided_and_the_replacement_resumes_on_the_same_losses(
        k8s_jobs, pod_net_factory, tmp_path):
    """SIGSTOP of the rank in worker-1: both pods' watchdogs exit 45 (HANG) with the watchdog's verdict, with every
    rank's stacks in debug/ and state/hang.json naming worker-1's node, which the run records as excluded. The
    relaunch renders that node as anti-affinity; the replaced pods (worker-1 now on another node) re-form the
    rendezvous through the same etcd, resume from the checkpoint at 4 and log the uninterrupted run's losses."""
    from mtk import exitcodes, run_layout
    from mtk.exclusions import with_recorded_exclusions

    watchdog = {"watchdog": {"step_timeout": STEP_TIMEOUT, "interval": 1}}
    # The uninterrupted reference: the same job, its own FSx (checkpoints) and etcd.
    ref_root = tmp_path / "reference"
    ref_job = _job(k8s_jobs, ref_root, HANG_ITERATIONS, resilience=watchdog)
    ref_dir = str(ref_root / "fsx" / "runs" / "tiny-eks-20261122-000003")
    ref_ptj, ref_spec = _manifests(ref_job, ref_dir)
    ref_net = pod_net_factory(_hosts(ref_ptj))
    ref_net.put_spec(ref_spec)
    ref_logs = ref_root / "logs"
    ref_logs.mkdir(parents=True)
    ref_pods = [_start(ref_net, ref_ptj, i, ref_root, ref_logs, _node(f"node-{i}")) for i in (0, 1)]
    assert _wait(ref_pods, 400, ref_logs) == [0, 0], _logs(ref_logs)
    reference = run_losses(Path(ref_dir), killed_writer=True)
    assert sorted(reference) == list(range(1, HANG_ITERATIONS + 1))

    root = tmp_path / "hang"
    job = _job(k8s_jobs, root, HANG_ITERATIONS, resilience=watchdog)
    run_dir = str(root / "fsx" / "runs" / "tiny-eks-20261122-000004")
    ptj, spec_text = _manifests(job, run_dir)
    net = pod_net_factory(_hosts(ptj))
    net.put_spec(spec_text)
    logs = root / "logs"
    logs.mkdir(parents=True)
    hook = root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SELF_STOP_HOOK)
    mark = root / "stopped.mark"
    stop_env = {"PYTHONPATH": str(hook), "MTK_TEST_STOP_MARK": str(mark)}
    pods = [_start(net, ptj, 0, root, logs, _node("node-0")),
            _start(net, ptj, 1, root, logs, {**_node("node-1"), **stop_env})]
    codes = _wait(pods, 400, logs)
    assert mark.exists(), "the rank in worker-1 never stopped itself:\n" + _logs(logs)
    assert codes == [exitcodes.HANG, exitcodes.HANG], _logs(logs)
    hang = json.loads((Path(run_dir) / run_layout.HANG_FILE).read_text())
    stopped_rank = int(mark.read_text())
    # Exit 45 with the watchdog's verdict file is the watchdog's doing: gloo's timeout writes none, exits otherwise.
    assert hang["blamed_hosts"] == ["node-1"] and hang["blamed_ranks"] == [stopped_rank], hang
    pod_of = {stopped_rank: operator_env.worker_pod(ptj["metadata"]["name"], 1),
              1 - stopped_rank: operator_env.worker_pod(ptj["metadata"]["name"], 0)}
    for rank, pod in pod_of.items():
        stacks = (Path(run_dir) / run_layout.DEBUG_DIR / f"stacks-{pod}-rank{rank}.txt").read_text()
        assert 'File "' in stacks, f"no stacks from rank {rank} in {pod}"
    excluded = (Path(run_dir) / run_layout.EXCLUDED_FILE).read_text().splitlines()
    assert [line.split("\t")[0] for line in excluded] == ["node-1"] and "hang watchdog" in excluded[0]
    losses_before = run_losses(Path(run_dir), killed_writer=True)
    assert max(losses_before) == 6, sorted(losses_before)

    # The relaunch (same run dir, as `mtk launch --run-dir` renders it) avoids node-1; the scheduler puts the
    # re-created worker-1 on node-2. Both pods start again with the relaunch's env and command.
    job2, note = with_recorded_exclusions(job, run_dir)
    assert note and "node-1" in note
    ptj2, spec2 = _manifests(job2, run_dir)
    (term,) = (ptj2["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]["nodeAffinity"]
               ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])
    assert term["matchExpressions"][0]["values"] == ["node-1"]
    net.put_spec(spec2)
    replaced = [_start(net, ptj2, 0, root, logs, _node("node-0")), _start(net, ptj2, 1, root, logs, _node("node-2"))]
    assert _wait(replaced, 400, logs) == [0, 0], _logs(logs)
    text = _logs(logs)
    assert "[checkpoint] resumed from" in text and "at iteration 4," in text, text
    losses = run_losses(Path(run_dir), killed_writer=True)
    assert sorted(losses) == sorted(reference)
    assert all(math.isclose(losses[i], reference[i], rel_tol=1e-6, abs_tol=1e-7) for i in reference), (
        losses, reference)
