"""`mtk build-image` for real: a private dockerd, a locally imported Python base, loopback registries, moto ECR.

The offline build switches off the network-dependent steps with build args (INSTALL_EFA=0, INSTALL_GDRCOPY=0,
INSTALL_NCCL_TESTS=0, INSTALL_DCGM=0, OFI_NCCL=never, MEGATRON_CORE_VERSION=) and the test base already holds
mtk's core dependencies, so RUN steps need no network (``--network none``). Everything else is the same
Dockerfile the NGC build uses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from mtk.containers.context import copy_source

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
JOB = REPO / "examples" / "tiny.yaml"
NAME = "mtk-test"
OFFLINE = ["--network", "none", "--build-arg", "INSTALL_EFA=0", "--build-arg", "INSTALL_GDRCOPY=0",
           "--build-arg", "OFI_NCCL=never", "--build-arg", "MEGATRON_CORE_VERSION=",
           "--build-arg", "INSTALL_NCCL_TESTS=0", "--build-arg", "INSTALL_DCGM=0",
           "--set", "image.extras=[]", "--set", f"image.name={NAME}", "--quiet"]
CLI = "import sys; from mtk.launcher.cli import main; sys.exit(main(sys.argv[1:]))"
STEP = re.compile(r"^\[\s*(\d+)/(\d+)\] (.*)$")


def run_cli(args: list[str], env: dict[str, str] | None = None, sampler=None,
            stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-c", CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    if sampler:
        sampler.start(proc)
    out, err = proc.communicate(stdin, timeout=600)
    if sampler:
        sampler.stop()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def steps(stdout: str) -> dict[int, tuple[str, bool]]:
    """index -> (instruction, cached) from the progress lines."""
    seen: dict[int, tuple[str, bool]] = {}
    for line in stdout.splitlines():
        match = STEP.match(line)
        if not match:
            continue
        index, text = int(match.group(1)), match.group(3)
        if text.startswith("done ("):
            seen[index] = (seen[index][0], text == "done (cached)")
        else:
            seen[index] = (text, False)
    return seen


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the checkout, so the code-change test can edit it."""
    src = tmp_path_factory.mktemp("src")
    copy_source(REPO, src)
    return src


@pytest.fixture(scope="module")
def built(tmp_path_factory, dockerd, base_image, source) -> dict:
    out = tmp_path_factory.mktemp("build")
    result = run_cli(["build-image", str(JOB), "--out", str(out), "--source", str(source),
                      "--base-image", base_image, *OFFLINE])
    assert result.returncode == 0, result.stdout + result.stderr
    return {"out": out, "stdout": result.stdout, "plan": json.loads((out / "build.json").read_text())}


def container_output(client, image: str, command: list[str], entrypoint: list[str] | None = None) -> tuple[int, str]:
    container = client.containers.create(image, command=command, entrypoint=entrypoint)
    try:
        container.start()
        code = container.wait(timeout=120)["StatusCode"]
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


def test_image_runs_the_entrypoint_and_doctor(built, dockerd):
    client = dockerd.client()
    tags = built["plan"]["tags"]
    assert tags[0] == f"{NAME}:latest" and re.fullmatch(rf"{NAME}:sha-[0-9a-f]{{12}}", tags[1])
    assert set(client.images.get(tags[0]).tags) >= set(tags)

    code, text = container_output(client, tags[0], ["--help"])
    assert code == 0 and "usage: mtk-entrypoint STEP" in text and "doctor" in text

    code, text = container_output(client, tags[0], ["doctor", "--json"])
    report = json.loads(text)
    status = {c["name"]: c for c in report["checks"]}
    assert status["mtk"]["status"] == "ok" and "/usr/local/lib/python3.11" in status["mtk"]["detail"]
    # the test base has no torch: doctor says so, names the fix, and fails the pre-flight
    assert status["torch"]["status"] == "FAIL" and "NGC" in status["torch"]["fix"]
    assert status["megatron.core"]["status"] == "FAIL"
    assert status["efa"]["status"] == "skip" and code == 1 and report["ok"] is False


def test_code_change_rebuilds_only_the_last_layers(built, dockerd, base_image, source, tmp_path):
    first = steps(built["stdout"])
    wheel_step = next(i for i, (text, _) in first.items() if text.startswith("COPY mtk-"))
    with open(source / "containers" / "doctor.py", "a") as fh:
        fh.write("\n# a code-only change\n")
    result = run_cli(["build-image", str(JOB), "--out", str(tmp_path), "--source", str(source),
                      "--base-image", base_image, *OFFLINE])
    assert result.returncode == 0, result.stdout + result.stderr
    second = steps(result.stdout)
    def same(text: str) -> str:
        return re.sub(r"content-hash=\w+", "content-hash=*", text)

    assert [same(t) for t, _ in second.values()] == [same(t) for t, _ in first.values()]  # same Dockerfile
    cached = {i for i, (_, c) in second.items() if c}
    from_step = next(i for i, (text, _) in first.items() if text.startswith("FROM "))
    # every layer between FROM and the wheel comes from the cache; the wheel and everything after it rebuild
    assert cached == set(range(from_step + 1, wheel_step)), f"cached {sorted(cached)}, wheel step {wheel_step}"
    plan = json.loads((tmp_path / "build.json").read_text())
    assert plan["content_hash"] != built["plan"]["content_hash"]
    installed = "/usr/local/lib/python3.11/dist-packages/mtk/containers/doctor.py"
    code, text = container_output(dockerd.client(), plan["tags"][1], [installed], entrypoint=["tail", "-n1"])
    assert code == 0 and text.strip() == "# a code-only change"  # the new image holds the edited code


def test_a_failing_step_is_named_with_its_output(built, base_image, source, tmp_path):
    """Turning the EFA step on in the offline build makes apt-get fail: the error shows that step and why."""
    result = run_cli(["build-image", str(JOB), "--out", str(tmp_path), "--source", str(source),
                      "--base-image", base_image, *OFFLINE, "--build-arg", "INSTALL_EFA=1"])  # last one wins
    assert result.returncode == 1 and "Traceback" not in result.stderr
    first_line = result.stderr.splitlines()[0]
    assert re.match(r'error: step \d+/\d+ failed: RUN set -eu; if \[ "\$INSTALL_EFA" != 1 \]', first_line)
    assert "    | " in result.stderr and "returned a non-zero code" in result.stderr


def test_sqsh_runs_enroot_import(built, dockerd, base_image, source, tmp_path):
    """enroot is not installable here: a stand-in `enroot` on PATH records its argv and writes the file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    stand_in = bin_dir / "enroot"
    stand_in.write_text('#!/bin/sh\n# stand-in for NVIDIA enroot: record argv, create the -o file\n'
                        'printf "%s\\n" "$@" >> "$ENROOT_CALLS"; echo --- >> "$ENROOT_CALLS"\n'
                        'out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
                        'echo sqsh > "$out"\n')
    stand_in.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "ENROOT_CALLS": str(calls)}
    sqsh = tmp_path / "images" / "mtk.sqsh"
    args = ["build-image", str(JOB), "--out", str(tmp_path / "b"), "--source", str(source),
            "--base-image", base_image, *OFFLINE, "--set", f"image.sqsh={sqsh}", "--sqsh"]
    result = run_cli(args, env)
    assert result.returncode == 0, result.stdout + result.stderr
    argv = calls.read_text().split("---\n")[0].splitlines()
    assert argv[:2] == ["import", "-o"] and argv[3] == f"dockerd://{NAME}:latest"
    assert Path(argv[2]).parent == sqsh.parent and argv[2] != str(sqsh)  # imported next to it, then renamed
    assert sqsh.read_text() == "sqsh\n" and not Path(argv[2]).exists()

    again = run_cli(args, env)  # the .sqsh is newer than the (fully cached) image: nothing to do
    assert again.returncode == 0 and "skipped" in again.stdout and calls.read_text().count("---") == 1
    forced = run_cli([*args, "--force"], env)
    assert forced.returncode == 0 and calls.read_text().count("---") == 2

    other = run_cli([*args[:-1], "--sqsh", str(tmp_path / "elsewhere.sqsh")], env)
    assert other.returncode == 2 and "differs from image.sqsh" in other.stderr  # a flag at odds with the spec


def test_sqsh_fallback_is_an_enroot_image(built, dockerd, tmp_path):
    from mtk.containers.enroot import make_sqsh

    assert shutil.which("enroot") is None, "this test covers the fallback; enroot is installed here"
    sqsh = tmp_path / "fallback.sqsh"
    lines: list[str] = []
    how = make_sqsh(dockerd.client(), built["plan"]["tags"][0], sqsh, lines.append)
    assert how == "fallback" and any("enroot is not installed" in line for line in lines)
    listing = subprocess.run(["unsquashfs", "-l", str(sqsh)], capture_output=True, text=True, check=True).stdout
    for path in ("/etc/rc", "/etc/environment", "/usr/local/bin/mtk-entrypoint", "/opt/mtk/requirements.txt",
                 "/usr/bin/python3"):
        assert f"squashfs-root{path}\n" in listing, path
    assert "squashfs-root/.dockerenv" not in listing
    rc = subprocess.run(["unsquashfs", "-cat", str(sqsh), "etc/rc"], capture_output=True, text=True,
                        check=True).stdout
    assert "exec mtk-entrypoint \"$@\"" in rc and "exec mtk-entrypoint --help" in rc
    environment = subprocess.run(["unsquashfs", "-cat", str(sqsh), "etc/environment"], capture_output=True,
                                 text=True, check=True).stdout
    assert "NCCL_NET_PLUGIN=ofi" in environment.splitlines()
    stats = subprocess.run(["unsquashfs", "-s", str(sqsh)], capture_output=True, text=True, check=True).stdout
    assert "Compression lzo" in stats


def test_push_to_a_loopback_registry(built, base_image, source, registry, tmp_path):
    result = run_cli(["build-image", str(JOB), "--out", str(tmp_path), "--source", str(source),
                      "--base-image", base_image, *OFFLINE, "--push", "--registry", registry])
    assert result.returncode == 0, result.stdout + result.stderr
    with urllib.request.urlopen(f"http://{registry}/v2/{NAME}/tags/list", timeout=10) as resp:
        tags = set(json.load(resp)["tags"])
    plan = json.loads((tmp_path / "build.json").read_text())
    assert tags == {t.rpartition(":")[2] for t in plan["tags"]}
    assert f"pushed: {registry}/{NAME}:latest" in result.stdout


class ArgvSampler:
    """Reads every process's argv while the CLI runs, keeping any that contains a secret."""

    def __init__(self, secrets: list[str]):
        self.secrets, self.hits, self.samples = secrets, [], 0
        self._done = threading.Event()

    def start(self, proc) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    argv = cmdline.read_bytes().decode(errors="replace")
                except OSError:
                    continue
                if any(s in argv for s in self.secrets):
                    self.hits.append(argv)
            self.samples += 1
            time.sleep(0.05)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def test_ecr_push_creates_the_repository_once_and_never_leaks_the_token(built, dockerd, base_image, source,
                                                                         moto_ecr, ecr_registry, tmp_path):
    endpoint, ecr = moto_ecr["endpoint"], moto_ecr["ecr"]
    account, region = moto_ecr["account"], moto_ecr["region"]
    secrets = [ecr_registry["token"], ecr_registry["password"]]
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": region, "AWS_CONFIG_FILE": str(home / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(home / "none")}
    ecr_host = f"{account}.dkr.ecr.{region}.amazonaws.com"
    out = tmp_path / "out"

    def push(account_host: str, sampler=None) -> subprocess.CompletedProcess:
        return run_cli(["build-image", str(JOB), "--out", str(out), "--source", str(source),
                        "--base-image", base_image, *OFFLINE, "--push", "--registry", account_host,
                        "--registry-host", ecr_registry["host"], "--ecr-endpoint", endpoint], env, sampler)

    sampler = ArgvSampler(secrets)
    first = push(ecr_host, sampler)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "created ECR repository mtk-test" in first.stdout
    second = push(ecr_host)
    assert second.returncode == 0 and "ECR repository mtk-test exists" in second.stdout
    repos = ecr.describe_repositories(registryId=account)["repositories"]
    assert [r["repositoryName"] for r in repos] == [NAME]

    url = f"http://{ecr_registry['host']}/v2/{NAME}/tags/list"
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {ecr_registry['token']}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert "latest" in json.load(resp)["tags"]

    wrong = push(f"111111111111.dkr.ecr.{region}.amazonaws.com")  # moto's token for another account
    assert wrong.returncode == 1
    assert f"login to {ecr_registry['host']} as AWS failed" in wrong.stderr and "rejected" in wrong.stderr

    assert sampler.samples > 10 and sampler.hits == []
    logs = [first.stdout, first.stderr, second.stdout, second.stderr, wrong.stdout, wrong.stderr,
            dockerd.log.read_text(errors="replace")]
    for text in logs:
        assert not any(s in text for s in secrets)
    files = [p for root in (out, home) for p in root.rglob("*") if p.is_file()]
    assert files and not (home / ".docker" / "config.json").exists()
    for path in files:
        data = path.read_bytes()
        assert not any(s.encode() in data for s in secrets), path
