"""Session fixtures for the container tests: a private dockerd, a locally imported Python base image, a
plain and an htpasswd registry on loopback, and moto's ECR server. Each starts here and FAILS if it cannot.

Nothing is pulled from the internet at build time: the base image is a debootstrap ``minbase`` rootfs plus
Debian's python3/pip and mtk's core dependencies, imported with ``docker import``. It is cached as a tarball
under ``$MTK_TEST_CACHE`` (default ``~/.cache/mtk-tests``) so only the first run pays for debootstrap;
``$MTK_TEST_STORAGE_DRIVER`` (default ``overlay2``) picks the test dockerd's storage driver. Both are read here
only: the package never reads a test-only setting (tests/unit/test_package_boundary.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tomllib
from support.ports import free_port

REPO = Path(__file__).resolve().parents[3]
BASE_TAG = "mtk-test-base:bookworm-py311"
BASE_VERSION = "v1"  # bump when the recipe below changes


def cache_dir() -> Path:
    path = Path(os.environ.get("MTK_TEST_CACHE") or Path.home() / ".cache" / "mtk-tests").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def core_requirements() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


def base_tarball() -> Path:
    """A rootfs tarball with python3 + pip + mtk's core deps; built once (~1 min), then reused."""
    tarball = cache_dir() / f"base-bookworm-py311-{BASE_VERSION}.tar"
    if tarball.exists():
        return tarball
    work = cache_dir() / f"build-{os.getpid()}"
    rootfs = work / "rootfs"
    try:
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-pip", "bookworm",
                        str(rootfs), "http://deb.debian.org/debian"], check=True, stdout=subprocess.DEVNULL)
        site = rootfs / "usr/local/lib/python3.11/dist-packages"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-cache-dir", "--no-compile",
                        "--target", str(site), "--only-binary=:all:", "--python-version", "3.11",
                        "--implementation", "cp", "--platform", "manylinux_2_17_x86_64",
                        *core_requirements()], check=True)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for child in (rootfs / junk).glob("*"):
                if child.is_file():
                    child.unlink()
        tmp = tarball.with_suffix(f".{os.getpid()}.tmp")  # concurrent sessions each write their own
        with tarfile.open(tmp, "w") as tar:
            tar.add(rootfs, arcname=".")
        os.replace(tmp, tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tarball



def wait_for(what: str, probe, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    """Poll ``probe`` until it returns truthy; FAIL (not skip) with the daemon's log when it never does."""
    deadline = time.monotonic() + timeout
    last_error = "none"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if probe():
                return
        except Exception as exc:  # not up yet: the probe's client raises until the daemon answers
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    stop(proc)
    pytest.fail(f"{what} did not come up (exit {proc.poll()}; last probe error: {last_error}); log tail:\n{tail}")


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def http_ok(url: str, auth: tuple[str, str] | None = None) -> bool:
    request = urllib.request.Request(url)
    if auth:
        import base64

        request.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=2) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as exc:
        return exc.code == 401 and auth is None  # an htpasswd registry is up when it asks for credentials


class Dockerd:
    def __init__(self, root: Path, host: str, proc: subprocess.Popen, log: Path):
        self.root, self.host, self.proc, self.log = root, host, proc, log

    def client(self):
        import docker

        return docker.DockerClient(base_url=self.host)


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory) -> Dockerd:
    """A private dockerd (socket, data and exec roots under a temp dir; no iptables, no bridge)."""
    if not shutil.which("dockerd"):
        pytest.fail("dockerd is missing: apt-get install docker.io")
    root = tmp_path_factory.mktemp("dockerd")
    host = f"unix://{root}/docker.sock"
    log = root / "dockerd.log"
    driver = os.environ.get("MTK_TEST_STORAGE_DRIVER", "overlay2")
    with open(log, "wb") as out:
        proc = subprocess.Popen(["dockerd", "-H", host, "--data-root", str(root / "data"),
                                 "--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid"),
                                 "--storage-driver", driver, "--iptables=false", "--ip6tables=false",
                                 "--bridge=none"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    daemon = Dockerd(root, host, proc, log)
    wait_for("dockerd", lambda: daemon.client().ping(), proc, log)
    old = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    yield daemon
    if old is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = old
    stop(proc)
    shutil.rmtree(root / "data", ignore_errors=True)


@pytest.fixture(scope="session")
def base_image(dockerd) -> str:
    """The cached Python base imported into the private daemon."""
    tarball = base_tarball()
    repo, _, tag = BASE_TAG.partition(":")
    dockerd.client().api.import_image_from_file(str(tarball), repository=repo, tag=tag)
    return BASE_TAG


def _registry(tmp: Path, htpasswd: str | None = None):
    port = free_port()
    config = {"version": 0.1, "storage": {"filesystem": {"rootdirectory": str(tmp / "data")}},
              "http": {"addr": f"127.0.0.1:{port}"}, "log": {"level": "warn"}}
    if htpasswd is not None:
        (tmp / "htpasswd").write_text(htpasswd)
        config["auth"] = {"htpasswd": {"realm": "mtk-test", "path": str(tmp / "htpasswd")}}
    import yaml

    (tmp / "config.yml").write_text(yaml.safe_dump(config))
    log = tmp / "registry.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["docker-registry", "serve", str(tmp / "config.yml")], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    wait_for("docker-registry", lambda: http_ok(f"http://127.0.0.1:{port}/v2/"), proc, log)
    return proc, f"127.0.0.1:{port}"


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """An open registry on loopback (dockerd treats 127.0.0.0/8 as insecure: plain HTTP is fine)."""
    if not shutil.which("docker-registry"):
        pytest.fail("docker-registry is missing: apt-get install docker-registry")
    proc, host = _registry(tmp_path_factory.mktemp("registry"))
    yield host
    stop(proc)


ECR_ACCOUNT = "123456789012"
ECR_REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_ecr(tmp_path_factory):
    """moto's server for the ECR API; yields (endpoint, boto3 ECR client)."""
    exe = shutil.which("moto_server")
    if not exe:
        pytest.fail("moto_server is missing: pip install 'moto[server]'")
    port = free_port()
    tmp = tmp_path_factory.mktemp("moto")
    log = tmp / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    wait_for("moto_server", lambda: http_ok(f"{endpoint}/moto-api/"), proc, log)
    import boto3

    ecr = boto3.client("ecr", region_name=ECR_REGION, endpoint_url=endpoint, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    yield {"endpoint": endpoint, "ecr": ecr, "account": ECR_ACCOUNT, "region": ECR_REGION}
    stop(proc)


@pytest.fixture(scope="session")
def ecr_registry(tmp_path_factory, moto_ecr):
    """An htpasswd registry on loopback whose only user is the one moto's ECR token names (AWS)."""
    import base64

    ecr = moto_ecr["ecr"]
    token = ecr.get_authorization_token(registryIds=[ECR_ACCOUNT])["authorizationData"][0]["authorizationToken"]
    user, _, password = base64.b64decode(token).decode().partition(":")
    # the password goes to htpasswd on stdin (-i), never in an argv
    line = subprocess.run(["htpasswd", "-niB", user], input=password, capture_output=True, text=True, check=True)
    proc, host = _registry(tmp_path_factory.mktemp("ecr-registry"), htpasswd=line.stdout)
    yield {"host": host, "token": token, "user": user, "password": password}
    stop(proc)
