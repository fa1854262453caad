"""A pod's termination saves (issue 44): kubelet's SIGTERM to one training pod's PID 1 — a spot reclaim, a node
drain, a deleted pod — with the default DataLoader workers, on the rendered PyTorchJob's pods run as processes with
exactly their env and command (the twin of test_k8s_c10d.py).

The ranks are held after an iteration so that the signal lands mid-run however fast the machine is; kubelet signals
only the container's PID 1 (``mtk-entrypoint train``), not its process group. The stop is agreed by every rank, so
both pods save the next iteration and exit REQUEUE (42) with no traceback in their logs; the re-created pods resume
there and every iteration's loss equals an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from mtk.k8s import names, yamlio
from mtk.k8s.backend import EksBackend
from mtk.launcher.paths import resolve_paths
from support import operator_env
from support.faults import Hold
from support.journey_local import losses as run_losses
from support.pod_net import image_env, pod_logs, wait_pods

from mtk import exitcodes

pytestmark = pytest.mark.integration

ITERATIONS, HELD_AFTER = 8, 3
NOISE = ("Traceback", "DataLoader worker", "SignalException")


def _render(k8s_jobs, fsx: Path, run_dir: str) -> tuple[list[dict], Path]:
    """The rendered objects, and the checkpoint dir the job resolves to (one per job name, beside its runs)."""
    job = resolve_paths(k8s_jobs.tiny_eks(
        cluster={"runs_dir": str(fsx / "runs"), "eks": {"fsx_mount": str(fsx), "rendezvous": "c10d"}},
        data={"dir": str(fsx / "data")},
        train={"iterations": ITERATIONS, "global_batch_size": 2, "eval_interval": None,
               "checkpoint": {"save_interval": None}}), "eks")
    objs = yamlio.load_all(EksBackend().render(job, run_dir).files["manifests/all.yaml"])
    return objs, Path(job.train.checkpoint.dir)


class Pods:
    """The PyTorchJob's two workers, started in the pod network with the operator's env (plus ``extra``)."""

    def __init__(self, objs: list[dict], net, home: Path, logs: Path):
        self.ptj = next(o for o in objs if o["kind"] == "PyTorchJob")
        self.svc = next(o for o in objs if o["kind"] == "Service")
        self.net, self.home, self.logs = net, home, logs
        net.put_spec(next(o for o in objs if o["kind"] == "ConfigMap")["data"][names.SPEC_KEY])

    def name(self, index: int) -> str:
        return operator_env.worker_pod(self.ptj["metadata"]["name"], index)

    def start(self, tag: str, extra: dict[str, str] | None = None) -> list:
        pods = []
        for index in (1, 0):  # worker 1 first: it waits for the store worker 0 hosts
            env = {**image_env(self.home), **operator_env.worker_pod_env(self.ptj, index),
                   "MTK_NODE_NAME": self.name(index), **(extra or {})}
            pods.append(self.net.start_pod(self.name(index), env, operator_env.worker_command(self.ptj),
                                           self.logs / f"{tag}-{self.name(index)}.log"))
        return pods[::-1]  # by worker index

    def wait(self, pods: list) -> list[int]:
        return wait_pods(pods, self.logs, timeout=600)


def _pods(k8s_jobs, pod_net_factory, root: Path) -> tuple[Pods, str, Path]:
    fsx = root / "fsx"
    run_dir = str(fsx / "runs" / "tiny-eks-20261128-000001")
    objs, ckpt = _render(k8s_jobs, fsx, run_dir)
    svc = next(o for o in objs if o["kind"] == "Service")["metadata"]["name"]
    job_name = next(o for o in objs if o["kind"] == "PyTorchJob")["metadata"]["name"]
    pod0, pod1 = operator_env.worker_pod(job_name, 0), operator_env.worker_pod(job_name, 1)
    net = pod_net_factory({svc: "127.0.1.1", pod0: "127.0.1.1", pod1: "127.0.1.2"})
    logs = root / "logs"
    logs.mkdir(parents=True)
    return Pods(objs, net, root, logs), run_dir, ckpt


def _pid_1(pod) -> int:
    """The container's PID 1 as this machine numbers it: the pod's namespace holder's one child."""
    [init] = psutil.Process(pod.pid).children()
    return init.pid


def test_kubelets_sigterm_to_one_pod_saves_every_rank_and_the_recreated_pods_resume_with_equal_losses(
        k8s_jobs, pod_net_factory, tmp_path):
    reference_pods, reference_dir, _ = _pods(k8s_jobs, pod_net_factory, tmp_path / "reference")
    assert reference_pods.wait(reference_pods.start("straight")) == [0, 0], pod_logs(reference_pods.logs)
    reference = run_losses(Path(reference_dir))
    assert sorted(reference) == list(range(1, ITERATIONS + 1)), sorted(reference)

    pods, run_dir, ckpt = _pods(k8s_jobs, pod_net_factory, tmp_path / "chain")
    hold = Hold(tmp_path / "hold", after=[HELD_AFTER])
    first = pods.start("terminated", hold.env())
    deadline = time.monotonic() + 600  # only fails a hung test
    while not hold.held(HELD_AFTER, ranks=2):
        assert all(p.poll() is None for p in first), "a pod ended before the hold:\n" + pod_logs(pods.logs)
        assert time.monotonic() < deadline, "the ranks never reached the hold:\n" + pod_logs(pods.logs)
        time.sleep(0.1)
    init = psutil.Process(_pid_1(first[1]))
    assert "mtk-entrypoint" in " ".join(init.cmdline()), init.cmdline()  # what kubelet signals
    os.kill(init.pid, signal.SIGTERM)
    while not hold.signalled(HELD_AFTER):
        assert time.monotonic() < deadline, "no rank caught the SIGTERM:\n" + pod_logs(pods.logs)
        time.sleep(0.1)
    hold.release(HELD_AFTER)

    saved = HELD_AFTER + 1  # the stop is acted on after the iteration in flight
    assert pods.wait(first) == [exitcodes.REQUEUE, exitcodes.REQUEUE], pod_logs(pods.logs)
    last = json.loads((Path(run_dir) / "state" / "last_exit.json").read_text())
    assert (last["code"], last["iteration"], last["checkpoint_iteration"]) == (exitcodes.REQUEUE, saved, saved), last
    assert f"iter_{saved:07d}" in {p.name for p in ckpt.iterdir()}, sorted(p.name for p in ckpt.iterdir())
    shown = "".join(f.read_text(errors="replace") for f in pods.logs.glob("terminated-*.log"))
    assert not [n for n in NOISE if n in shown], shown[-4000:]
    before = run_losses(Path(run_dir), killed_writer=True)
    assert max(before) == saved, sorted(before)

    assert pods.wait(pods.start("recreated")) == [0, 0], pod_logs(pods.logs)
    after = run_losses(Path(run_dir), killed_writer=True)
    assert sorted(after) == list(range(1, ITERATIONS + 1)), sorted(after)
    for it in range(1, ITERATIONS + 1):
        assert after[it] == reference[it], f"iteration {it}: {after[it]} != {reference[it]} (uninterrupted)"
