"""``mtk-entrypoint preflight``: the health gate every node passes before training starts.

One process per node (``srun`` on Slurm; the local backend has one node and skips it). Each node runs

* ``mtk-entrypoint doctor``'s checks with the job's expectations (torch, CUDA, GPU count = procs_per_node, NCCL,
  EFA count, megatron.core);
* storage: the run dir, checkpoint dir and data dir must take a file write + fsync + delete;
* nccl-tests ``all_reduce_perf -c 1`` and ``dcgmi diag -r 1`` when they are on PATH (GPU nodes), parsed;
* one process group across the nodes (gloo on CPU, NCCL on GPU): an all-reduce whose result every node checks
  (each contributes ``node rank + 1``, so the sum is known) and a timed ``resilience.preflight.allreduce_mb``
  all-reduce for the bus bandwidth.

Node 0 gathers every node's verdict and writes ``state/preflight.json`` (per node: checks, problems, bandwidth)
and ``state/preflight.hosts`` (the failing hosts, one per line); every node writes ``state/health/<host>.json``.
Every node exits 0 when all passed, else ``exitcodes.PREFLIGHT``; the Slurm script excludes the failing hosts and
restarts without them, or refuses the run when too few nodes are left.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mtk import checkpoint_paths, exitcodes, run_layout
from mtk.files import atomic_write, temp_beside
from mtk.rendezvous import STAGGERED_C10D, parse_rdzv_conf, staggered_c10d

INIT_TIMEOUT_S = 120


@dataclass
class NodeHealth:
    host: str
    node_rank: int
    problems: list[str] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    allreduce_ok: bool | None = None
    busbw_gbps: float | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


# ------------------------------------------------------------------ per-node checks
def storage_problems(paths: dict[str, str]) -> list[str]:
    """Each path must accept a small write + fsync + delete (a stale or read-only mount fails here)."""
    out = []
    for label, path in paths.items():
        probe = Path(path) / f".mtk-preflight-{socket.gethostname()}-{os.getpid()}"
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
            fd, probe = temp_beside(probe)  # a new file: never through a link planted in a shared dir
            with os.fdopen(fd, "wb") as fh:
                fh.write(os.urandom(4096))
                fh.flush()
                os.fsync(fh.fileno())
            probe.unlink()
        except OSError as exc:
            out.append(f"storage: {label} {path} is not writable ({exc.strerror or exc}); check the mount on "
                       f"this node")
    return out


_NCCL_ROW = re.compile(r"^\s*\d+\s+\d+\s+\w+\s+\w+\s+-?\d+\s")


def parse_all_reduce_perf(text: str) -> tuple[int, float | None]:
    """(total #wrong over out-of-place and in-place columns, average bus bandwidth GB/s) of nccl-tests output."""
    wrong = 0
    for line in text.splitlines():
        if not _NCCL_ROW.match(line):
            continue
        cols = line.split()
        # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
        for idx in (8, 12):
            if idx < len(cols) and cols[idx].isdigit():
                wrong += int(cols[idx])
    m = re.search(r"Avg bus bandwidth\s*:\s*([0-9.]+)", text)
    return wrong, float(m.group(1)) if m else None


def parse_dcgm_diag(text: str) -> list[str]:
    """The test names ``dcgmi diag`` reports as Fail."""
    return [m.group(1).strip() for m in re.finditer(r"\|\s*([^|]+?)\s*\|\s*Fail", text)]


def _dcgm_diag(dcgmi: str) -> tuple[subprocess.CompletedProcess, bool]:
    """``dcgmi diag -r 1``; in a container no DCGM host engine runs, so start one (and stop it after) when the
    first attempt cannot connect and ``nv-hostengine`` is installed (the image installs both)."""
    argv = [dcgmi, "diag", "-r", "1"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    engine = shutil.which("nv-hostengine")
    if out.returncode == 0 or engine is None or "host engine" not in (out.stdout + out.stderr).lower():
        return out, False
    subprocess.run([engine], capture_output=True, text=True, timeout=60)
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=600), True
    finally:
        subprocess.run([engine, "--term"], capture_output=True, text=True, timeout=60)


def tool_problems(job) -> tuple[list[str], list[dict]]:
    """nccl-tests and DCGM, only on GPU nodes where they are installed."""
    problems: list[str] = []
    checks: list[dict] = []
    if job.cluster.device != "gpu":
        return problems, checks
    perf = shutil.which("all_reduce_perf")
    if perf:
        argv = [perf, "-b", "8", "-e", "64M", "-f", "2", "-c", "1", "-g", str(job.cluster.procs_per_node)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        wrong, busbw = parse_all_reduce_perf(out.stdout)
        checks.append({"name": "all_reduce_perf", "rc": out.returncode, "wrong": wrong, "busbw_gbps": busbw})
        if out.returncode != 0 or wrong:
            problems.append(f"nccl-tests all_reduce_perf: exit {out.returncode}, #wrong {wrong} on this node's GPUs")
    dcgmi = shutil.which("dcgmi")
    if dcgmi:
        out, started = _dcgm_diag(dcgmi)
        failed = parse_dcgm_diag(out.stdout)
        checks.append({"name": "dcgmi diag -r 1", "rc": out.returncode, "failed": failed,
                       "hostengine": "started by the preflight" if started else "already running"})
        if failed:
            problems.append(f"DCGM diag failed: {', '.join(failed)}")
    return problems, checks


def node_checks(job, run_dir: str) -> NodeHealth:
    from mtk.containers import doctor

    from mtk.netenv import efa_count

    health = NodeHealth(host=socket.gethostname(), node_rank=0)
    expect = doctor.Expect(device=job.cluster.device,
                           gpus=job.cluster.procs_per_node if job.cluster.device == "gpu" else None,
                           efa=efa_count(job))
    for c in doctor.run_checks(expect):
        health.checks.append(asdict(c))
        if c.status == doctor.FAIL:
            health.problems.append(f"doctor {c.name}: {c.detail}" + (f" -> {c.fix}" if c.fix else ""))
    ckpt = checkpoint_paths.checkpoint_dir(job.train.checkpoint.dir, run_dir)  # where the engine writes
    health.problems += storage_problems({"run dir": run_dir, "train.checkpoint.dir": ckpt, "data.dir": job.data.dir})
    problems, checks = tool_problems(job)
    health.problems += problems
    health.checks += checks
    return health


# ------------------------------------------------------------------ across nodes
def group_from_environment(env: dict[str, str]) -> tuple[int, int, str, int] | None:
    """(node rank, nodes, master host, port) from torch-style variables, or from the scheduler's node numbering
    and the run script's ``MTK_PREFLIGHT_HOST``/``PORT`` (Slurm); None for a single node."""
    if all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return int(env["RANK"]), int(env["WORLD_SIZE"]), env["MASTER_ADDR"], int(env["MASTER_PORT"])
    if "MTK_PREFLIGHT_HOST" in env and "MTK_PREFLIGHT_PORT" in env:
        from mtk.rendezvous import node_place

        place = node_place(env)
        if place.node_rank is not None:
            return place.node_rank, place.nnodes or 1, env["MTK_PREFLIGHT_HOST"], int(env["MTK_PREFLIGHT_PORT"])
    return None


RDZV_BACKENDS = ("etcd-v2", "c10d")
_RENDEZVOUS: list = []  # the handlers joined: a c10d host's store lives as long as its handler


def rendezvous_from_environment(env: dict[str, str]) -> tuple[str, str, int, str, dict[str, str]] | None:
    """(endpoint, rendezvous id, nodes, torch rendezvous backend, its conf) for pods that learn their rank from a
    rendezvous (EKS: the preflight init container gets no rank from the operator): the run's etcd (``etcd-v2``,
    the default when MTK_PREFLIGHT_RDZV_BACKEND is unset) or a c10d store that worker 0's init container hosts,
    its joins staggered as training's are when MTK_PREFLIGHT_RDZV_CONF asks (``mtk.rendezvous.staggered_c10d``)."""
    if "MTK_PREFLIGHT_RDZV" in env and "MTK_PREFLIGHT_RDZV_ID" in env and "MTK_PREFLIGHT_NODES" in env:
        backend = env.get("MTK_PREFLIGHT_RDZV_BACKEND") or "etcd-v2"
        if backend not in RDZV_BACKENDS:
            raise ValueError(f"MTK_PREFLIGHT_RDZV_BACKEND={backend!r}: use one of {', '.join(RDZV_BACKENDS)}")
        backend, conf = staggered_c10d(backend, env.get("MTK_PREFLIGHT_RDZV_CONF", ""), env,
                                       "MTK_PREFLIGHT_RDZV_CONF")
        return (env["MTK_PREFLIGHT_RDZV"], env["MTK_PREFLIGHT_RDZV_ID"], int(env["MTK_PREFLIGHT_NODES"]), backend,
                parse_rdzv_conf(conf, "MTK_PREFLIGHT_RDZV_CONF"))
    return None


def join_by_rendezvous(endpoint: str, run_id: str, nodes: int, backend: str = "etcd-v2",
                       conf: dict[str, str] | None = None):
    """(rank, world, master host, port) from torch's rendezvous (etcd-v2, c10d or mtk's staggered c10d), or None
    when the others never come (a pod restarted alone while its peers train, or a c10d host that is not there): the
    node's own checks still decide then."""
    from torch.distributed.elastic.rendezvous import (
        RendezvousConnectionError,
        RendezvousParameters,
        RendezvousTimeoutError,
    )
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    c10d = backend in ("c10d", STAGGERED_C10D)
    if backend == STAGGERED_C10D:
        from .staggered_rendezvous import register

        register()
    # c10d: no store to reach means worker 0's init container is not meeting (it already trains).
    gave_up = (RendezvousTimeoutError, RendezvousConnectionError) if c10d else RendezvousTimeoutError

    params = RendezvousParameters(backend=backend, endpoint=endpoint, run_id=run_id, min_nodes=nodes,
                                  max_nodes=nodes, join_timeout=str(INIT_TIMEOUT_S),
                                  **({"read_timeout": str(INIT_TIMEOUT_S)} if c10d else {}), **(conf or {}))
    try:
        handler = get_rendezvous_handler(params)  # c10d: connects to (or hosts) the store here
        info = handler.next_rendezvous()
    except gave_up:
        return None
    _RENDEZVOUS.append(handler)  # c10d: worker 0's store serves the others until this process ends
    if isinstance(info, tuple):  # torch < 2.4
        store, rank, world = info
    else:
        store, rank, world = info.store, info.rank, info.world_size
    # etcd's store cannot back a gloo/NCCL group itself (and c10d's lives in worker 0's init container): rank 0
    # publishes a TCP address of its own through it.
    if rank == 0:
        host = socket.gethostbyname(socket.gethostname())
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        store.set("mtk-preflight-master", f"{host}:{port}")
    host, _, port_text = store.get("mtk-preflight-master").decode().rpartition(":")
    return rank, world, host, int(port_text)


def allreduce_check(health: NodeHealth, job, rank: int, world: int, host: str, port: int) -> list[dict]:
    """Join the group, check an all-reduce result and time a large one; returns every node's health (on all)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    gpu = job.cluster.device == "gpu" and torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo", init_method=f"tcp://{host}:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=INIT_TIMEOUT_S))
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    try:
        probe = torch.full((1024,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(probe)
        expected = world * (world + 1) / 2
        health.allreduce_ok = bool(torch.all(probe == expected).item())
        if not health.allreduce_ok:
            health.problems.append(f"all-reduce returned {probe[0].item():g} where {expected:g} was due: this "
                                   "node's interconnect or memory corrupts data")
        mb = job.resilience.preflight.allreduce_mb
        big = torch.ones(int(mb * 2**20 / 4), dtype=torch.float32, device=device)
        dist.all_reduce(big)  # warm-up
        if gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(big)
        if gpu:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        health.busbw_gbps = round(2 * (world - 1) / world * big.numel() * 4 / seconds / 1e9, 3) if world > 1 else None
        from mtk.netenv import min_busbw_gbps

        floor, why = min_busbw_gbps(job)
        if floor is not None and health.busbw_gbps is not None and health.busbw_gbps < floor:
            health.problems.append(f"all-reduce bus bandwidth {health.busbw_gbps} GB/s is below the floor "
                                   f"{floor} GB/s ({why}); set resilience.preflight.min_busbw_gbps to change it")
        everyone: list = [None] * world
        dist.all_gather_object(everyone, asdict(health))
        return everyone
    finally:
        dist.destroy_process_group()


def verdict(nodes: list[dict]) -> dict:
    failed = [{"host": n["host"], "node_rank": n["node_rank"], "problems": n["problems"]}
              for n in nodes if n["problems"]]
    return {"ok": not failed, "time": time.time(), "nodes": nodes, "failed": failed,
            "failed_hosts": sorted({f["host"] for f in failed})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mtk-entrypoint preflight", description=__doc__.splitlines()[0])
    ap.add_argument("--job", required=True, help="the run's job.json")
    ap.add_argument("--run-dir", default=None, help="run directory (default: the job file's folder)")
    args = ap.parse_args(argv)
    from mtk.spec import load_job_json

    run_dir = os.path.abspath(args.run_dir or os.path.dirname(os.path.abspath(args.job)))
    job = load_job_json(args.job)
    health = node_checks(job, run_dir)
    group = group_from_environment(dict(os.environ))
    rdzv = rendezvous_from_environment(dict(os.environ)) if group is None else None
    joined = join_by_rendezvous(*rdzv) if rdzv else None
    if rdzv and joined is None:
        health.checks.append({"name": "all-reduce across nodes", "skipped": f"no full group of {rdzv[2]} "
                              f"within {INIT_TIMEOUT_S} s (a pod restarted while its peers train)"})
    if joined is not None:
        health.node_rank = joined[0]
        nodes = allreduce_check(health, job, *joined)
    elif group is None:
        nodes = [asdict(health)]
    else:
        rank, world, host, port = group
        health.node_rank = rank
        nodes = allreduce_check(health, job, rank, world, host, port)
    layout = run_layout.RunLayout.of(run_dir)
    atomic_write(layout.health(health.host), json.dumps(asdict(health), indent=2) + "\n")
    result = verdict(nodes)
    if health.node_rank == 0:
        atomic_write(layout.preflight, json.dumps(result, indent=2) + "\n")
        atomic_write(layout.preflight_hosts, "".join(f"{h}\n" for h in result["failed_hosts"]))
    for n in result["failed"]:
        print(f"mtk preflight: node {n['host']} (node {n['node_rank']}) FAILED: {'; '.join(n['problems'])}",
              flush=True)
    bw = [n["busbw_gbps"] for n in nodes if n.get("busbw_gbps") is not None]
    print(f"mtk preflight: {len(nodes) - len(result['failed'])}/{len(nodes)} node(s) healthy"
          + (f"; all-reduce bus bandwidth {min(bw)}..{max(bw)} GB/s" if bw else ""), flush=True)
    return exitcodes.OK if result["ok"] else exitcodes.PREFLIGHT


if __name__ == "__main__":
    sys.exit(main())
