"""The Slurm test cluster driven the way a user does (the ``mtk`` CLI in a subprocess with SLURM_CONF set),
shared by tests/integration/slurm and tests/journeys."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from support.minicluster import MiniCluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
REFRESH_S = 3.0  # the longest a wait loop goes without asking `mtk status` afresh


class Harness:
    """The CLI and the Slurm clients against the test cluster."""

    def __init__(self, cluster: MiniCluster, root: Path):
        self.cluster, self.root = cluster, root
        self.env = cluster.env()
        self.env.pop("MTK_STUB", None)
        self.env.pop("MTK_STUB_PREFLIGHT", None)
        self._polled: dict[Path, tuple[tuple, float, list[dict]]] = {}  # run -> (seen, ask again by, rows)

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

    def polled_status(self, run_dir: Path) -> list[dict]:
        """``status`` for a wait loop. ``mtk status`` is a process start plus sacct (~0.4 CPU s, taken from the
        job under test on this 2-core machine, twice a second): it runs again only once Slurm's queue or the
        run's state files have changed, or ``REFRESH_S`` after its last answer (what only sacct shows)."""
        seen = self._seen(run_dir)
        last = self._polled.get(run_dir)
        if last is not None and last[0] == seen and time.monotonic() < last[1]:
            return last[2]
        rows = self.status(run_dir)
        self._polled[run_dir] = (seen, time.monotonic() + REFRESH_S, rows)
        return rows

    def _seen(self, run_dir: Path) -> tuple:
        """What changes when a step's state can: Slurm's queue (a C client's RPC) and the run's state files."""
        files = []
        try:  # its files only: heartbeats/ and health/ change every second while a job merely runs
            for path in (run_dir / "state").iterdir():
                st = path.stat()
                if stat.S_ISREG(st.st_mode):
                    files.append((path.name, st.st_mtime_ns, st.st_size))
        except OSError:  # not written yet, or a file replaced while listed: count it as a change
            files = [("?", time.monotonic_ns(), 0)]
        files.sort()
        return self.slurm("squeue", "-h", "-o", "%i %T %r"), tuple(files)

    def state(self, run_dir: Path, step: str = "train", polled: bool = False) -> dict:
        rows = self.polled_status(run_dir) if polled else self.status(run_dir)
        return next(s for s in rows if s["step"] == step)

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
            s = self.state(run_dir, step, polled=True)
            if s["state"] in states:
                return s
            if s["state"] in ("COMPLETED", "STOPPED", "FAILED", "CANCELLED") and "#" not in step:
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
