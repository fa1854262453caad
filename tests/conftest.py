"""Shared test helpers. Area fixtures live in conftest.py files of their own test folders."""

import http.server
import os
import site
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from support import cost
from support.ports import free_port

# `make test` runs the unit lane beside the integration lane (scripts/test_lanes.py): how long hypothesis takes to
# generate an example then depends on the machine's load, not on the strategy, so that is no health failure.
settings.register_profile("mtk", suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mtk")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def pytest_configure(config: pytest.Config) -> None:
    cost.configure(config)
    # The megatron-core check's verdict cache: one fresh, empty one per test session (children inherit it), so no
    # test reuses a verdict from an earlier run or writes into the user's ~/.cache/mtk.
    os.environ["MTK_CACHE_DIR"] = tempfile.mkdtemp(prefix="mtk-test-cache-")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests by cost: marker per expensive thing a test drives, ``fast`` for the rest (tests/support/cost.py)."""
    cost.mark(items, Path(__file__).resolve().parent)


@pytest.fixture
def repo() -> Path:
    return REPO


# ---- HTTP servers that want a bearer token (getdata auth on every backend); they record what they saw.


@dataclass
class Served:
    host: str
    port: int
    seen: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization header)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()


def serve(host: str, files: dict[str, bytes], token: str | None = None,
          redirects: dict[str, str] | None = None) -> Served:
    """Serve ``files`` at their paths; with ``token``, only to ``Authorization: Bearer <token>`` (401 else);
    ``redirects`` maps a path to an absolute URL answered with 302."""
    served = Served(host, 0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            auth = self.headers.get("Authorization")
            served.seen.append((self.path, auth))
            if redirects and self.path in redirects:
                self.send_response(302)
                self.send_header("Location", redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if token is not None and auth != f"Bearer {token}":
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = files.get(self.path)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # keep pytest output clean; the requests are in ``seen``
            return

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    served.port, served.server = server.server_address[1], server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return served


@pytest.fixture
def http_servers():
    """``start(host, files, token=None, redirects=None)`` -> Served; every server is shut down afterwards."""
    made: list[Served] = []

    def start(*args, **kwargs) -> Served:
        made.append(serve(*args, **kwargs))
        return made[-1]

    yield start
    for s in made:
        s.close()


@pytest.fixture(scope="session")
def corpus_formats():
    """tests/corpus_formats.py: one document list written as JSONL + .zst + Parquet and as one JSONL file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("corpus_formats", Path(__file__).parent / "corpus_formats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def local_s3(monkeypatch):
    """A real S3 API on 127.0.0.1 (moto's server) that boto3 in this process and its children talks to;
    yields a client. Credentials are moto's dummies, set only for the test."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_DEFAULT_REGION": "us-east-1",
                           "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}"}.items():
            monkeypatch.setenv(key, value)
        yield boto3.client("s3")
    finally:
        server.stop()


# ---- The Slurm test cluster, shared by tests/integration/slurm and tests/journeys (one per session).


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    from support.minicluster import MiniCluster

    cluster = MiniCluster(tmp_path_factory.mktemp("slurm-cluster"))
    cluster.start()  # raises with the daemons' log tails if it cannot: the session fails, it never skips
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def mtk_venv(tmp_path_factory) -> Path:
    """A virtualenv on 'shared storage' that sees this interpreter's packages (mtk, torch, megatron.core)
    and has its own ``mtk-entrypoint``, as ``pip install mtk`` would create it."""
    venv = tmp_path_factory.mktemp("venvs") / "mtk venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    # When this interpreter is itself a venv (the project's .venv), --system-site-packages reaches only the base
    # Python's packages: a .pth makes this interpreter's own site-packages (mtk, torch, megatron.core) visible.
    inner = subprocess.run([venv / "bin" / "python", "-c", "import site; print(site.getsitepackages()[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    # addsitedir (not a bare path line) so the parent's own .pth files run too: an editable mtk install is one.
    (Path(inner) / "mtk-parent-env.pth").write_text(
        f"import site; list(map(site.addsitedir, {site.getsitepackages()!r}))\n")
    entry = venv / "bin" / "mtk-entrypoint"
    # A shebang cannot hold a path with a space (pip uses a /bin/sh trampoline for the same reason).
    entry.write_text('#!/bin/bash\nexec "$(dirname "$0")/python" -m mtk.launcher.entrypoint "$@"\n')
    entry.chmod(0o755)
    return venv


# ---- Rendered Kubernetes pods as processes against a real etcd (tests/support/pod_net.py).


@pytest.fixture
def pod_net_factory(tmp_path_factory):
    """Start PodNets on demand; each is torn down (pods, etcd, namespace holder) when the test ends."""
    from support.pod_net import PodNet

    started: list[PodNet] = []

    def make(hosts: dict[str, str]) -> PodNet:
        net = PodNet(tmp_path_factory.mktemp("podnet"))
        net.start(hosts)
        started.append(net)
        return net

    yield make
    for net in started:
        net.stop()
