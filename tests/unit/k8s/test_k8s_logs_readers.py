"""`mtk logs` of a many-pod PyTorchJob reads the pods' logs several at a time, in the pods' order, holding at most
LOG_READERS ahead (issue 45: one at a time, 1,024 pods at ~20 ms per API call took ~20 s)."""

from __future__ import annotations

import time

from mtk.k8s import backend as k8s_backend
from mtk.k8s.backend import EksBackend
from support.kube_boundary import PodsKube

from mtk.runs import Run


def slow_kube(pods: int) -> PodsKube:
    """The client at mtk's boundary (support.kube_boundary): later pods answer sooner, so an unordered reader would
    be caught."""
    return PodsKube(pods, "big", delay=lambda i: 0.002 * (pods - i) / pods)


def _run() -> Run:
    return Run(backend="eks", run_dir="/fsx/runs/big", name="big", ids={"train": "PyTorchJob/big"},
               backend_notes={"namespace": "default", "run_id": "big"})


def test_logs_come_in_pod_order_read_several_at_a_time():
    kube = slow_kube(200)
    lines = list(EksBackend(kube_factory=lambda ns: kube).logs(_run()))
    want = [f"[{n}] {n} line {k}\n" for n in sorted(kube.names) for k in (1, 2)]
    assert lines == want
    assert 1 < kube.most <= k8s_backend.LOG_READERS


def test_a_slow_reader_holds_at_most_log_readers_ahead():
    kube = slow_kube(200)
    stream = EksBackend(kube_factory=lambda ns: kube).logs(_run())
    next(stream)
    time.sleep(0.2)  # the consumer dawdles: the reads must not run away from it
    assert kube.started <= k8s_backend.LOG_READERS + 1
    assert len(list(stream)) == 399


def test_one_pod_is_read_directly():
    kube = slow_kube(1)
    assert list(EksBackend(kube_factory=lambda ns: kube).logs(_run())) == ["big-worker-0 line 1\n",
                                                                          "big-worker-0 line 2\n"]
