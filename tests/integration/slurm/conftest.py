"""A real three-node Slurm 22.05 cluster (munge + slurmctld + slurmd node1..node3 in private namespaces), started
once per session, plus the environments jobs run in. Fails (never skips) when the cluster cannot start.

``harness`` drives it the way a user does: the ``mtk`` CLI in a subprocess with SLURM_CONF set.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support.minicluster import MiniCluster

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"

# A stand-in `mtk-entrypoint` for tests of the batch script's own logic (requeue, guardrail, signals,
# quoting on a real cluster): behaviour chosen by MTK_STUB, e.g. "sleep:30", "exit:1", "usr2:42".
STUB_ENTRYPOINT = r"""#!/bin/bash
if [ "$1" = preflight ]; then
  # The health gate's contract with the batch script (MTK_STUB_PREFLIGHT): "once:N" fails task N's node until the
  # run has excluded a node, "fail:N" fails task N's node every time; failing = its name in state/preflight.hosts
  # (written by node 0) and exit 46 on every node. Unset: every node passes.
  mode=${MTK_STUB_PREFLIGHT%%:*}
  task=${MTK_STUB_PREFLIGHT#*:}
  [ -n "$MTK_STUB_PREFLIGHT" ] || exit 0
  [ "$mode" = once ] && [ -f "$MTK_RUN_DIR/state/excluded_nodes" ] && exit 0
  echo "preflight task $SLURM_PROCID on $(hostname): port $MTK_PREFLIGHT_PORT"
  [ "$SLURM_PROCID" = "$task" ] && hostname >"$MTK_RUN_DIR/state/preflight.hosts"
  sleep 1
  exit 46
fi
printf '%s\n' "node=$(hostname) task=$SLURM_PROCID restart=${SLURM_RESTART_COUNT:-0} args=$*"
printf '%s\0' "$@" >"$MTK_RUN_DIR/stub-argv.$SLURM_NODEID"
mode=${MTK_STUB%%:*}
arg=${MTK_STUB#*:}
case "$mode" in
  exit) exit "$arg" ;;
  sleep) sleep "$arg" & wait $! ;;
  tick) for i in $(seq "$arg"); do echo "tick $i"; sleep 1; done ;;
  hang)
    # The hang watchdog's contract with the batch script: task $arg's node is blamed (state/hang.hosts) and every
    # node exits 45 (HANG); once the run has excluded nodes, the restart completes.
    [ -f "$MTK_RUN_DIR/state/excluded_nodes" ] && exit 0
    [ "$SLURM_PROCID" = "$arg" ] && hostname >"$MTK_RUN_DIR/state/hang.hosts"
    sleep 1
    exit 45 ;;
  usr2)
    trap 'echo "task $SLURM_PROCID got USR2"; exit "$arg"' USR2
    sleep 300 & wait $! ;;
  *) exit 0 ;;
esac
"""


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> MiniCluster:
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


@pytest.fixture(scope="session")
def stub_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venvs") / "stub"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text('PATH="$(dirname "${BASH_SOURCE[0]}"):$PATH"\nexport PATH\n')
    entry = venv / "bin" / "mtk-entrypoint"
    entry.write_text(STUB_ENTRYPOINT)
    entry.chmod(0o755)
    return venv


class Harness:
    """The CLI and the Slurm clients against the test cluster."""

    def __init__(self, cluster: MiniCluster, root: Path):
        self.cluster, self.root = cluster, root
        self.env = cluster.env()
        self.env.pop("MTK_STUB", None)
        self.env.pop("MTK_STUB_PREFLIGHT", None)

    def mtk(self, *args: str, check: bool = True, env: dict | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess:
        out = subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True,
                             env={**self.env, **(env or {})}, timeout=timeout, cwd=self.root)
        if check and out.returncode != 0:
            raise AssertionError(f"mtk {' '.join(args)} -> {out.returncode}\n{out.stdout}\n{out.stderr}")
        return out

    def slurm(self, *argv: str) -> str:
        out = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=60)
        assert out.returncode == 0, f"{argv}: {out.stderr}"
        return out.stdout

    def spec(self, name: str, example: str = "tiny-slurm.yaml", **changes) -> Path:
        """A copy of an example with nested changes, e.g. train={"iterations": 8}; mock data by default."""
        data = yaml.safe_load((EXAMPLES / example).read_text())
        data["name"] = name
        data["cluster"]["runs_dir"] = str(self.root / "runs")
        if changes.pop("mock", True):
            data["data"] = {"dir": str(self.root / "data"), "num_workers": 0}
        for section, values in changes.items():
            target = data.setdefault(section, {})
            for key, value in values.items():
                node = target
                *parents, last = key.split(".")
                for p in parents:
                    node = node.setdefault(p, {})
                node[last] = value
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def launch(self, spec: Path | str, *sets: str, env: dict | None = None) -> Path:
        args = ["launch", str(spec), "--backend", "slurm", "--no-megatron-check"]  # proven in test_validate_by_megatron
        for s in sets:
            args += ["--set", s]
        out = self.mtk(*args, env=env)
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith("run: "))
        return Path(line.removeprefix("run: "))

    def status(self, run_dir: Path) -> list[dict]:
        return json.loads(self.mtk("status", str(run_dir), "--json").stdout)

    def state(self, run_dir: Path, step: str = "train") -> dict:
        return next(s for s in self.status(run_dir) if s["step"] == step)

    def run_record(self, run_dir: Path) -> dict:
        return json.loads((run_dir / "run.json").read_text())

    def wait(self, what: str, predicate: Callable[[], object], timeout: float = 300, every: float = 0.5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.cluster.diagnostics(5)}")

    def wait_state(self, run_dir: Path, states: set[str], step: str = "train", timeout: float = 300) -> dict:
        def reached():
            s = self.state(run_dir, step)
            if s["state"] in states:
                return s
            if s["state"] in ("COMPLETED", "FAILED", "CANCELLED") and "#" not in step:
                raise AssertionError(f"{step} ended {s['state']} while waiting for {states}:\n"
                                     + self.mtk("status", str(run_dir)).stdout)
            return None
        return self.wait(f"{step} in {states}", reached, timeout)

    def active_jobs(self) -> list[str]:
        return self.slurm("squeue", "-h", "-o", "%i %T").split("\n")[:-1]

    def processes_of(self, run_dir: Path) -> list[str]:
        """Command lines of live processes that mention the run dir (the host sees into the namespaces)."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(run_dir) in cmd:
                found.append(f"{proc.name}: {cmd}")
        return found


def _drained(h: Harness) -> None:
    """Leave the shared cluster empty for the next test."""
    subprocess.run(["scancel", "--user=root"], env=h.env, capture_output=True, timeout=30)
    h.wait("the cluster to drain", lambda: not h.active_jobs(), timeout=120)


@pytest.fixture
def harness(slurm_cluster, tmp_path) -> Harness:
    h = Harness(slurm_cluster, tmp_path)
    yield h
    _drained(h)


@pytest.fixture(scope="module")
def module_harness(slurm_cluster, tmp_path_factory) -> Harness:
    h = Harness(slurm_cluster, tmp_path_factory.mktemp("slurm-module"))
    yield h
    _drained(h)


def metrics(run_dir: Path) -> dict[int, float]:
    """iteration -> lm loss from the engine's metrics.jsonl (the last record wins after a resume)."""
    out = {}
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line)
        if rec.get("kind", "train") == "train" and "lm_loss" in rec:
            out[int(rec["iteration"])] = float(rec["lm_loss"])
    return out


@pytest.fixture(scope="session")
def read_metrics():
    return metrics
