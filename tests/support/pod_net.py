"""A real etcd (v2 API) and a private network + mount namespace in which rendered Kubernetes pods run as plain
processes: the etcd Service name and the pod names resolve (a private /etc/hosts), the job spec ConfigMap appears
at /etc/mtk/job.json (an overlay over /etc), and etcd listens on the manifest's port 2379 on that namespace's
loopback — nothing on the host changes. Shared by tests/integration/k8s and tests/journeys."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


class PodNet:
    """A network+mount namespace holder with etcd inside; pods are started into it with ``nsenter``."""

    def __init__(self, root: Path):
        self.root = root
        self.holder: subprocess.Popen | None = None
        self.etcd: subprocess.Popen | None = None
        self.pods: list[subprocess.Popen] = []

    @property
    def pid(self) -> int:
        assert self.holder is not None
        return self.holder.pid

    def start(self, hosts: dict[str, str], timeout: float = 30.0) -> None:
        for tool in ("unshare", "nsenter", "etcd", "ip"):
            if not shutil.which(tool):
                raise RuntimeError(f"{tool} is required for the EKS pod tests (apt-get install util-linux "
                                   "etcd-server iproute2)")
        (self.root / "up").mkdir(parents=True, exist_ok=True)
        (self.root / "work").mkdir(exist_ok=True)
        hosts_text = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in hosts.items())
        (self.root / "hosts").write_text(hosts_text)
        setup = (
            "set -e; ip link set lo up; "
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={self.root}/up,workdir={self.root}/work /etc; "
            f"mkdir -p /etc/mtk; cp {self.root}/hosts /etc/hosts; echo ready; exec sleep infinity")
        self.holder = subprocess.Popen(["unshare", "--net", "--mount", "--propagation", "private",
                                        "sh", "-c", setup], stdout=subprocess.PIPE, text=True,
                                       start_new_session=True)
        line = self.holder.stdout.readline().strip()
        if line != "ready":
            self.stop()
            raise RuntimeError(f"could not set up the pod namespace (got {line!r})")
        data = self.root / "etcd-data"
        with open(self.root / "etcd.log", "w") as log:
            self.etcd = subprocess.Popen(
                ["nsenter", "-t", str(self.pid), "--net", "--mount", "--",
                 "etcd", "--enable-v2=true", "--data-dir", str(data), "--name", "standin-etcd",
                 "--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
                 "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls",
                 "http://127.0.0.1:2380", "--initial-cluster", "standin-etcd=http://127.0.0.1:2380"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            probe = self.run([sys.executable, "-c", "import urllib.request,sys;"
                              "sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:2379/v2/keys/',timeout=1)"
                              ".status==200 else 1)"])
            if probe.returncode == 0:
                return
            if self.etcd.poll() is not None:
                break
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"etcd v2 API did not come up: {(self.root / 'etcd.log').read_text()[-2000:]}")

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", "-t", str(self.pid), "--net", "--mount", "--", *argv],
                              capture_output=True, text=True, **kw)

    def put_spec(self, text: str) -> None:
        """The ConfigMap volume: /etc/mtk/job.json inside the namespace."""
        src = self.root / "job.json"
        src.write_text(text)
        out = self.run(["cp", str(src), "/etc/mtk/job.json"])
        assert out.returncode == 0, out.stderr

    def start_pod(self, hostname: str, env: dict[str, str], command: list[str], log: Path,
                  cwd: str | None = None) -> subprocess.Popen:
        """A 'pod': its own pid + UTS namespace (hostname = pod name), the given env only, the command."""
        inner = ["sh", "-c", 'hostname "$1"; shift; exec "$@"', "pod", hostname,
                 "env", "-i", *[f"{k}={v}" for k, v in env.items()], *command]
        with open(log, "ab") as fh:
            pod = subprocess.Popen(
                ["nsenter", "-t", str(self.pid), "--net", "--mount", "--",
                 "unshare", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc", *inner],
                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
        self.pods.append(pod)
        return pod

    @staticmethod
    def kill_pod(pod: subprocess.Popen) -> None:
        """Kill the whole pod: SIGKILL to its pid-namespace holder takes every process inside with it."""
        if pod.poll() is None:
            os.killpg(pod.pid, signal.SIGKILL)
        pod.wait(timeout=30)

    def stop(self) -> None:
        """Kill every pod, etcd and the namespace holder (the namespaces go with their last process)."""
        for pod in self.pods:
            self.kill_pod(pod)
        for proc in (self.etcd, self.holder):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        if self.holder is not None and self.holder.stdout:
            self.holder.stdout.close()


def image_env(home: Path) -> dict[str, str]:
    """What the image gives every container before the manifest's env: this venv's programs, a home, a locale."""
    return {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
            "LANG": "C.UTF-8"}


def pod_logs(logs: Path) -> str:
    """The last 4,000 characters of every pod's log, for an assertion's message."""
    return "\n".join(f"===== {f.name}\n{f.read_text(errors='replace')[-4000:]}" for f in sorted(logs.glob("*.log")))


def wait_pods(pods: list[subprocess.Popen], logs: Path, timeout: float = 400) -> list[int]:
    """Every pod's exit code, in order; the pods' logs in the failure when they do not all end in time."""
    deadline = time.monotonic() + timeout
    codes = []
    for pod in pods:
        try:
            codes.append(pod.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            raise AssertionError("pods did not finish in time:\n" + pod_logs(logs)) from None
    return codes
