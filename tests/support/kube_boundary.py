"""The Kubernetes client at mtk's boundary (what ``EksBackend(kube_factory=...)`` gets): a PyTorchJob of N worker
pods that ``get``/``list``/``pod_log``/``follow_pod_log`` answer, counting the calls and how many pod-log reads run
at once. Nothing can stand in for an API server here (the integration tests drive the real client against
tests/integration/k8s/apiserver_standin.py); the unit tests and benchmarks/scale_launcher.py share this one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def two_lines(pod: str) -> str:
    return f"{pod} line 1\n{pod} line 2\n"


class PodsKube:
    """``pods`` running worker pods of run ``run`` (``<run>-worker-<i>``); each pod-log read takes ``delay(i)``
    seconds for pod i and returns ``log(pod)``."""

    def __init__(self, pods: int, run: str = "big", delay: Callable[[int], float] = lambda i: 0.0,
                 log: Callable[[str], str] = two_lines):
        self.names = [f"{run}-worker-{i}" for i in range(pods)]
        self.delay, self.log = delay, log
        self.lock = threading.Lock()
        self.calls = self.active = self.most = self.started = 0
        self.pods = [{"metadata": {"name": n, "labels": {"mtk/component": "train"}},
                      "status": {"phase": "Running", "containerStatuses": [
                          {"name": "pytorch", "restartCount": 1, "state": {"running": {}}}]}} for n in self.names]

    def _count(self) -> None:
        with self.lock:
            self.calls += 1

    def get(self, kind, name):
        self._count()
        return {"kind": kind, "metadata": {"name": name}, "status": {"conditions": [
            {"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}}

    def list(self, kind, selector):
        self._count()
        return self.pods if kind == "Pod" else []

    def pod_log(self, pod, container=None, **_options):
        with self.lock:
            self.calls += 1
            self.active += 1
            self.started += 1
            self.most = max(self.most, self.active)
        time.sleep(self.delay(int(pod.rsplit("-", 1)[1])))
        with self.lock:
            self.active -= 1
        return self.log(pod)

    def follow_pod_log(self, pod, container=None):
        yield from self.pod_log(pod, container).splitlines(keepends=True)
