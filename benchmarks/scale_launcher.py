"""The launcher's verbs at scale (issue 45, 1d): mtk's real CLI on a 1,024-node job, on this machine.

Each verb runs through mtk's click CLI in this process (``CliRunner``: the code a user's ``mtk ...`` runs, after
its interpreter start-up, which is measured once on its own and is the same at every N), timed at growing N:

* ``launch --dry-run`` of the 7.5B examples at N nodes (Slurm and EKS renders);
* ``status`` of a Slurm run whose train job failed at N nodes, after three requeues: the tests' Slurm double
  (``tests/support/slurm_commands.py``: ``squeue``/``scontrol``/``sacct`` executables on PATH) prints what Slurm
  prints for such a job (a node list with the holes 100 excluded nodes leave, ``sacct`` lines with the job's steps),
  the run dir holds N hosts, the events and a log of N nodes' labelled lines ending in srun's report of the failed
  task; tests/unit/slurm/test_slurm_commands_double.py holds that double to mtk's reading of Slurm;
* ``logs`` of that run: the whole log, ``--node HOST`` and ``-f`` (the job has ended: it reads to the end);
* ``status``/``logs`` of an N-pod PyTorchJob with the Kubernetes client replaced at its boundary (the backend's
  ``kube_factory``, with the unit tests' double, ``tests/support/kube_boundary.py``): the API calls and the time of
  mtk's side;
* ``ls`` over R runs (R = 10 … 1,000), each a Slurm run Slurm has forgotten (sacct answers);
* a relaunch (``launch --dry-run``) whose earlier attempts excluded B nodes (B = 10 … 100) at 1,024 nodes.

    python benchmarks/scale.py --only launcher [--quick]
    python benchmarks/scale_launcher.py [--quick] [--profile VERB]   # VERB: status, logs, ls, ...: cProfile
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO), str(REPO / "tests")]

from scale_core import Series  # noqa: E402
from support import slurm_commands  # noqa: E402  (the tests' Slurm double, checked against mtk there)
from support.kube_boundary import PodsKube  # noqa: E402

TARGET_S = 2.0
LOG_LINES_PER_NODE = 40  # a node's labelled lines in a train log after a few hundred iterations (rank 0's many)
JOB = 7000
API_LATENCY_S = 0.02  # one pod-log read's round trip to an EKS API server (stand-in: the fake client sleeps it)


def forgotten_runs(root: Path, data: Path, count: int) -> Path:
    """`count` finished Slurm runs (Slurm forgot them: sacct answers) with 200 train records each."""
    from mtk.runs import Run

    runs = root / f"runs-{count}"
    for i in range(count):
        run_dir = runs / f"job{i:04d}-20261128-000000"
        (run_dir / "state").mkdir(parents=True)
        jid = 100000 + i
        recs = [{"kind": "train", "iteration": it, "lm_loss": 2.5, "tokens_per_s": 1e6, "restart_count": 0,
                 "time": 1.0e9 + it} for it in range(1, 201)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        (run_dir / "job.json").write_text(json.dumps({"name": f"job{i:04d}", "train": {"iterations": 200}}))
        (data / f"sacct.{jid}").write_text(f"{jid}|COMPLETED|0:0|node[0001-0008]\n{jid}.batch|COMPLETED|0:0|node0001\n")
        Run(backend="slurm", run_dir=str(run_dir), name=f"job{i:04d}", ids={"train": str(jid)},
            created=1.0e9 + i).save()
    return runs


# --------------------------------------------------------------------------- timing

def _cli(args: list[str], env: dict[str, str] | None = None, fresh_cache: bool = False) -> float:
    """Wall seconds of `mtk ARGS` as a user runs it: a new process (interpreter, CLI, the verb's lazy imports, its
    work), best of three (the machine is shared: the best is the least disturbed); the fake Slurm commands are on
    this process's PATH, which the child inherits."""
    best = float("inf")
    for _ in range(3):
        run_env = dict(env or os.environ)
        if fresh_cache:  # nothing cached from the round before: what a first `mtk ls` pays
            run_env["MTK_CACHE_DIR"] = tempfile.mkdtemp(prefix="mtk-cold-cache-")
        t0 = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, cwd=REPO,
                                env=run_env)
        best = min(best, time.perf_counter() - t0)
        if result.returncode not in (0, 1):  # status of a failed run exits 0; a failed step may exit 1
            raise RuntimeError(f"mtk {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}")
    return best


def _in_process(args: list[str]) -> None:
    """`mtk ARGS` in this process (for cProfile)."""
    from click.testing import CliRunner
    from mtk.launcher.cli import cli

    CliRunner().invoke(cli, args, catch_exceptions=False)


def startup_seconds() -> float:
    """Interpreter + CLI start-up of `mtk --help` (a separate process; the same at every N)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "mtk", "--help"], capture_output=True, check=True, cwd=REPO)
        best = min(best, time.perf_counter() - t0)
    return best


@contextlib.contextmanager
def _path_with(bin_dir: Path):
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{bin_dir}:{old}"
    try:
        yield
    finally:
        os.environ["PATH"] = old


def _k8s(pods: int) -> tuple[float, float, float, int, int]:
    """(status s, logs s, logs --node s, status API calls, logs API calls) for an N-pod PyTorchJob, in this
    process (the client is replaced at its boundary: nothing else can stand in for an API server here)."""
    from mtk.k8s.backend import EksBackend

    from mtk.runs import Run

    run = Run(backend="eks", run_dir="/fsx/runs/big-eks", name="big", ids={"train": "PyTorchJob/big-eks"},
              backend_notes={"namespace": "default", "run_id": "big-eks"})
    lines = "".join(f"iteration {i} | lm loss 2.3\n" for i in range(LOG_LINES_PER_NODE))
    kube = PodsKube(pods, "big-eks", delay=lambda i: API_LATENCY_S, log=lambda pod: lines)
    backend = EksBackend(kube_factory=lambda ns: kube, poll=0.01, etcd_timeout=0.1)
    t0 = time.perf_counter()
    backend.status(run)
    status_s = time.perf_counter() - t0
    status_calls, kube.calls = kube.calls, 0
    t0 = time.perf_counter()
    for _ in backend.logs(run):
        pass
    logs_s = time.perf_counter() - t0
    logs_calls = kube.calls
    t0 = time.perf_counter()
    for _ in backend.logs(run, node=f"worker-{pods // 2}"):
        pass
    node_s = time.perf_counter() - t0
    return status_s, logs_s, node_s, status_calls, logs_calls


def _eks_imports() -> float:
    """What an EKS verb pays before its API calls: interpreter, CLI and the backend's imports (a new process)."""
    code = "import mtk.launcher.cli, mtk.k8s.backend, mtk.k8s.states"
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
        best = min(best, time.perf_counter() - t0)
    return best


def measure(quick: bool) -> list[Series]:
    nodes = [8, 64, 256, 1024] if quick else [8, 32, 128, 512, 1024]
    run_counts = [10, 100, 1000] if not quick else [10, 100, 300]
    bad_counts = [10, 30, 100]
    start = startup_seconds()
    eks_start = _eks_imports()
    got: dict[str, list[float]] = {}
    calls: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="mtk-scale-launcher-") as tmp:
        root = Path(tmp)
        data = root / "slurm-data"
        data.mkdir()
        slurm_commands.install(root / "bin", data)
        with _path_with(root / "bin"):
            for n in nodes:
                for backend, example in (("slurm", "gpt-7.5b-p5-slurm.yaml"), ("eks", "gpt-7.5b-p5-eks.yaml")):
                    out = root / f"render-{backend}-{n}"
                    got.setdefault(f"launch --dry-run ({backend})", []).append(_cli(
                        ["launch", str(REPO / "examples" / example), "--dry-run", "--no-megatron-check",
                         "--out", str(out), "--set", f"cluster.nodes={n}",
                         "--set", f"train.global_batch_size={8 * n}",
                         *(["--set", f"cluster.runs_dir={root}/r"] if backend == "slurm" else [])]))
                run_dir = slurm_commands.failed_train_run(root, data, n, JOB + 10 * n, LOG_LINES_PER_NODE)
                got.setdefault("status (Slurm, failed train job)", []).append(_cli(["status", str(run_dir)]))
                got.setdefault("logs (Slurm, whole log)", []).append(_cli(["logs", str(run_dir)]))
                host = (run_dir / "state" / f"nodes.{JOB + 10 * n}").read_text().split()[n // 2]
                got.setdefault("logs --node HOST (Slurm)", []).append(_cli(["logs", str(run_dir), "--node", host]))
                got.setdefault("logs -f (Slurm, ended job)", []).append(_cli(["logs", "-f", str(run_dir)]))
                s, lg, nd, sc, lc = _k8s(n)
                got.setdefault("status (PyTorchJob)", []).append(eks_start + s)
                got.setdefault(f"logs (PyTorchJob, {API_LATENCY_S * 1000:.0f} ms per API call)", []).append(
                    eks_start + lg)
                got.setdefault("logs --node (PyTorchJob)", []).append(eks_start + nd)
                calls.setdefault("status (PyTorchJob): API calls", []).append(sc)
                calls.setdefault("logs (PyTorchJob): API calls", []).append(lc)
            ls_s, ls_cold = [], []
            warm = dict(os.environ, MTK_CACHE_DIR=str(root / "ls-cache"))
            for count in run_counts:
                runs = forgotten_runs(root, data, count)
                ls_cold.append(_cli(["ls", "--runs-dir", str(runs)], fresh_cache=True))
                ls_s.append(_cli(["ls", "--runs-dir", str(runs)], env=warm))  # its first round fills the cache
            excl_s = []
            for bad in bad_counts:
                excl_s.append(_relaunch_with_exclusions(root, bad))
    before = _k8s_logs_one_at_a_time([n for n in nodes if n <= 256])
    budget = TARGET_S
    out = [Series("launcher", "CLI start-up (mtk --help, a process)", "s", [nodes[0], nodes[-1]], [start, start],
                  note="interpreter + click + mtk's CLI, paid by every verb and the same at every N. Each figure "
                       "below is a whole verb as a user runs it (a new process, best of three), start-up included, "
                       "so a law near constant means start-up still dominates at that N. The PyTorchJob ones: the "
                       f"EKS backend's imports in a new process ({eks_start:.2f} s) plus mtk's side with the client "
                       "replaced at its boundary")]
    for metric, values in got.items():
        out.append(Series("launcher", metric, "s", nodes, [_own(v, start) for v in values], target=budget))
    out.append(Series("launcher", "logs (PyTorchJob), one pod at a time (mtk before)", "s", before[0],
                      [_own(eks_start + v, start) for v in before[1]],
                      target=budget, note=f"{API_LATENCY_S * 1000:.0f} ms per API call (the stand-in client "
                                          "sleeps it): every pod's log read in turn"))
    from mtk.k8s.backend import LOG_READERS

    for metric, values in calls.items():
        out.append(Series("launcher", metric, "calls", nodes, values,
                          note=f"API round trips; logs reads them {LOG_READERS} at a time (k8s/backend.py)"))
    out.append(Series("launcher", "ls over R runs (n = runs)", "s", run_counts, [_own(v, start) for v in ls_s],
                      target=budget,
                      note="R Slurm runs Slurm has forgotten (sacct answers), 200 train records each; n is runs, "
                           "not nodes; each run's metrics read once, then kept until the file changes "
                           "(launcher/progress_cache.py)"))
    out.append(Series("launcher", "ls over R runs, nothing cached yet (n = runs)", "s", run_counts,
                      [_own(v, start) for v in ls_cold], target=budget,
                      note="the first ls after the runs were written: every metrics.jsonl parsed"))
    out.append(Series("launcher", "relaunch with B excluded nodes recorded, 1,024 nodes (n = B)", "s", bad_counts,
                      [_own(v, start) for v in excl_s], target=budget,
                      note="launch --dry-run (slurm) whose earlier attempts (5 run dirs) excluded B nodes"))
    return out


def _own(wall: float, start: float) -> float:
    """The figure reported for a verb: its whole wall time (start-up included, `start` only documents it)."""
    return wall


def _k8s_logs_one_at_a_time(nodes: list[int]) -> tuple[list[int], list[float]]:
    """`mtk logs` of an N-pod PyTorchJob reading one pod's log at a time, as mtk did before issue 45."""
    import mtk.k8s.backend as k8s_backend

    saved = k8s_backend.LOG_READERS
    k8s_backend.LOG_READERS = 1
    try:
        return nodes, [_k8s(n)[1] for n in nodes]
    finally:
        k8s_backend.LOG_READERS = saved


def _relaunch_with_exclusions(root: Path, bad: int) -> float:
    runs = root / f"excl-runs-{bad}"
    ckpt = f"{root}/ckpt-{bad}"
    for k in range(5):  # five earlier attempts of the same checkpoints, each excluding its share
        d = runs / f"gpt-{k}"
        (d / "state").mkdir(parents=True)
        (d / "job.json").write_text(json.dumps({"name": "gpt", "train": {"checkpoint": {"dir": ckpt}}}))
        (d / "state" / "excluded_nodes").write_text("".join(
            f"node{5000 + k * bad + i:04d}\t2026-11-28T00:00:00Z\thang watchdog blamed rank {i}\n"
            for i in range(bad // 5)))
    return _cli(["launch", str(REPO / "examples" / "gpt-7.5b-p5-slurm.yaml"), "--dry-run", "--no-megatron-check",
                 "--out", str(root / f"excl-out-{bad}"), "--run-dir", str(runs / "gpt-relaunch"),
                 "--set", "cluster.nodes=1024", "--set", "train.global_batch_size=8192",
                 "--set", f"cluster.runs_dir={runs}", "--set", f"train.checkpoint.dir={ckpt}"])


def profile(verb: str, n: int = 1024) -> None:
    """cProfile one verb at `n` nodes: the top of the cumulative list."""
    import cProfile
    import pstats

    with tempfile.TemporaryDirectory(prefix="mtk-scale-launcher-") as tmp:
        root = Path(tmp)
        data = root / "slurm-data"
        data.mkdir()
        slurm_commands.install(root / "bin", data)
        with _path_with(root / "bin"):
            run_dir = slurm_commands.failed_train_run(root, data, n, JOB, LOG_LINES_PER_NODE)
            args = {"status": ["status", str(run_dir)], "logs": ["logs", str(run_dir)],
                    "ls": ["ls", "--runs-dir", str(forgotten_runs(root, data, 1000)) if verb == "ls" else ""]}[verb]
            _in_process(args)
            prof = cProfile.Profile()
            prof.enable()
            _in_process(args)
            prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    if "--profile" in sys.argv:
        profile(sys.argv[sys.argv.index("--profile") + 1])
        raise SystemExit(0)
    from scale_core import table

    print(table(measure("--quick" in sys.argv)))
