"""The Slurm test cluster driven the way a user does (the ``mtk`` CLI in a subprocess with SLURM_CONF set),
shared by tests/integration/slurm and tests/journeys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from support.minicluster import MiniCluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


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


def drained(h: Harness) -> None:
    """Leave the shared cluster empty for the next test."""
    subprocess.run(["scancel", "--user=root"], env=h.env, capture_output=True, timeout=30)
    h.wait("the cluster to drain", lambda: not h.active_jobs(), timeout=120)


def metrics(run_dir: Path) -> dict[int, float]:
    """iteration -> lm loss from the engine's metrics.jsonl (the last record wins after a resume)."""
    out = {}
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line)
        if rec.get("kind", "train") == "train" and "lm_loss" in rec:
            out[int(rec["iteration"])] = float(rec["lm_loss"])
    return out
