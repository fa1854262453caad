"""Rendezvous at 1,024 nodes from counts (issue 51, item 2): torch's own rendezvous as mtk renders it — static
(Slurm, TrainJob) and c10d (PyTorchJob) — counted at growing N, its store server timed per request where it is
not CPU-starved, and the 1,024-node figure derived from the two (the model: scale_rendezvous_model.py).

    python benchmarks/scale_rendezvous.py [--quick]      (or through benchmarks/scale.py --only rendezvous)

Four measurements, none of them a wall time of many processes on this machine's 2 cores:

1. **Counts, load-independent**: N agents run torch's real handler (``get_rendezvous_handler(...)
   .next_rendezvous()`` as torchrun builds it, then the agent's own ``_assign_worker_ranks``: the rest of what
   torchrun does before it starts the workers), forked from one process that imported torch once. Every request
   is counted **on the server's side**: the libuv TCPStore server's own trace log (``TORCH_CPP_LOG_LEVEL=INFO``,
   ``TORCH_DISTRIBUTED_DEBUG=DETAIL``) names each request it serves — the C++ ones too (validate, ping, the
   count-in add, node 0's polls). The store under every handler is wrapped (a Python ``Store`` forwarding to the
   TCPStore, below torch's PrefixStore) to count the bytes each call carries and, for c10d, which
   compare-and-sets lost and which reads were the joined agents' once-a-second polls. Static's counts do not
   depend on timing but for node 0's 10 ms polls; c10d's lost compare-and-sets and polls do, and are shown as
   measured here, not fitted into the figure: the model computes them from the protocol.
2. **Service time per request**: one libuv TCPStore server in its own process; a load generator in another
   issues each request kind of the mix at the sizes it has at N (the c10d state of N participants, N keys of
   node 0's multi_get/multi_set); the server's CPU seconds per request (``/proc/<pid>/task/*/schedstat``) is its
   service time — the server is one thread, so that is what it can serve, however loaded the machine is.
3. **The c10d handler's own work per attempt** at k participants (decode the state, add itself, encode it), in
   one process: what each link of the compare-and-set chain costs the winning agent.
4. The wall times of N forked handlers and of 2..16 real torchrun agents (``mtk.launcher.quiet_torchrun`` for
   static, ``torch.distributed.run`` for c10d): **this machine's limit**, printed, never fitted — 64 processes on
   2 cores measure CPU starvation.

etcd-v2 (AWS's reference layout) runs the c10d protocol through etcd; the full run counts its requests from etcd's
own ``/metrics``. Anchors: torch's libuv TCPStore tutorial (98,304 ranks initialise in ~100 s: ~1 ms per client
served), pytorch#124982 (rank assignment and exit barrier made linear: 4,000 hosts 373 s -> ~10 s).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from contextlib import contextmanager, suppress
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from scale_core import RANKS_PER_NODE, TARGET_NODES, Series  # noqa: E402
from scale_rendezvous_model import (  # noqa: E402
    KEEP_ALIVE_S,
    POLL_S,
    STAGGER_SPREADS,
    TORCH_JITTER_S,
    Costs,
    c10d_join,
    highest_cost_factor,
    interpolate,
    stagger_window_s,
    staggered_holds,
    staggered_join,
    static_join,
)
from support.ports import free_port  # noqa: E402

TARGET_S = 60.0  # issue 45 item 2: every agent joined within 60 s at 1,024 nodes
# Each agent names itself by socket.getfqdn() unless given an address; here that is a reverse lookup of 127.0.0.1
# sent to this sandbox's DNS server, which stalls up to its 5 s timeout under a burst of lookups (a pod answers its
# own name from /etc/hosts). The agents are given their address, and the resolver a 1 s bound for any other lookup.
LOCAL_ADDR = "127.0.0.1"
os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")
TRACE_ENV = {"TORCH_CPP_LOG_LEVEL": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
# A round trip between two nodes of a cluster (same placement group / VPC): loopback here is ~20 us; 100 us is a
# datacenter TCP round trip with its kernel stack, on the safe side.
RTT_S = 100e-6
# Where the 1,024-node figure's c10d agents come from when every node starts at once: torch's own first-join jitter.
PLAN = {  # (backend) -> node counts counted with forked handlers; quick first, then the full run's
    "static": ([4, 8, 16, 32, 64], [4, 8, 16, 32, 64, 128, 256]),
    "c10d": ([4, 8, 16, 32], [4, 8, 16, 32, 64, 128]),
    "etcd-v2": ([], [4, 16, 32, 64]),
}
AGENTS = {"static": ([2, 4], [2, 4, 8, 16]), "c10d": ([2, 4], [2, 4, 8, 16]), "etcd-v2": ([], [2, 4, 8])}
SERVICE_SIZES = (16, 64, 256, 1024)  # participants / keys at which each request kind is timed


# ----------------------------------------------------------------------------------------------- helpers
def cpu_s(pid: int) -> float:
    """CPU seconds of every thread of a live process so far (schedstat: nanoseconds, unlike /proc/<pid>/stat's
    10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def pss_mb(pid: int) -> float:
    """Proportional set size of one process (shared pages divided among their users), MB."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def store_server(trace_log: Path | None = None):
    """A libuv TCPStore server in its own process (node 0's store); yields (port, pid). With ``trace_log`` the
    server writes every request it serves there (its trace log)."""
    port = free_port()
    code = ("import sys, torch.distributed as d\n"
            f"s = d.TCPStore('127.0.0.1', {port}, is_master=True, multi_tenant=True, use_libuv=True, "
            "wait_for_workers=False)\n"
            "assert s.libuvBackend, 'not the libuv server'\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n")
    env = {**os.environ, **(TRACE_ENV if trace_log else {})}
    err = open(trace_log, "wb") if trace_log else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err, text=True, env=env)
    try:
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"the TCPStore server did not start ({line!r})")
        yield port, proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if trace_log:
            err.close()


# ------------------------------------------------------------------- counting on the server's side
_TRACE = re.compile(r"TCPStoreLibUvBackend\.cpp:\d+\] \[c10d - trace\] (\w+) (.*?)\s*address:(\S+)\s*$")
# A python-level call and the requests the TCPStore client sends for it (TCPStore.cpp: a get waits first).
REQUESTS_PER_CALL = {"set": {"set": 1}, "get": {"wait": 1, "get": 1}, "compare_set": {"compareAndSet": 1},
                     "add": {"add": 1}, "wait": {"wait": 1}, "check": {"check": 1},
                     "multi_get": {"wait": 1, "multi_get": 1}, "multi_set": {"multi_set": 1}}


def server_requests(log: str) -> tuple[Counter, Counter]:
    """(requests by kind, of which node 0's count polls) from a libuv TCPStore server's trace log.

    The server logs a multi_get/multi_set when it has read its key count, before its keys: a message longer than
    one read is parsed again when the rest arrives and logged again. A client's requests are parsed in order, one
    at a time, so a multi_* line identical to that client's previous line is the same request, not another."""
    kinds: Counter[str] = Counter()
    polls: Counter[str] = Counter()
    last: dict[str, str] = {}
    for line in log.splitlines():
        m = _TRACE.search(line)
        if not m:
            continue
        kind, rest, client = m.group(1), m.group(2), m.group(3)
        seen = f"{kind} {rest}"
        if kind.startswith("multi_") and last.get(client) == seen:
            continue
        last[client] = seen
        kinds[kind] += 1
        if kind in ("get", "wait") and re.search(r"key(?:s\[0\])?:/?init/", rest):
            polls[kind] += 1
    return kinds, polls


class _Tally:
    """What one agent's handler asked of the store from Python, and the bytes each call carried."""

    def __init__(self, state_key: str) -> None:
        self.calls: Counter[str] = Counter()
        self.other_calls: Counter[str] = Counter()  # not on the c10d state key: store info, rank assignment
        self.bytes = 0
        self.state_key = state_key
        self.cas_seen = 0
        self.cas_lost = 0
        self.keep_alives = 0
        self.joined = False
        self.state_gets = 0
        self.state_size = 0

    def to_json(self) -> dict:
        return {"calls": dict(self.calls), "other_calls": dict(self.other_calls), "bytes": self.bytes,
                "cas_lost": self.cas_lost,
                "keep_alives": self.keep_alives, "polls": max(0, self.state_gets - 1), "state_size": self.state_size}


def _size(value) -> int:
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value)
    return 8 if isinstance(value, int) else 0


def counting_store(inner, tally: _Tally):
    """``inner`` (a TCPStore) behind a Python Store that counts every call and its bytes; torch's PrefixStore
    forwards to it like to any store. For the c10d state key it also tells a lost compare-and-set from a won one
    (the store returns the value it now holds: ours if we won) and the first read from the polls after joining."""
    import torch.distributed as dist

    class CountingStore(dist.Store):
        def __init__(self) -> None:
            super().__init__()

        def _note(self, op: str, key, *payload) -> None:
            tally.calls[op] += 1
            if key != tally.state_key:
                tally.other_calls[op] += 1
            tally.bytes += _size(key) + sum(_size(p) for p in payload)

        def set(self, key, value):
            self._note("set", key, value)
            return inner.set(key, value)

        def get(self, key):
            out = inner.get(key)
            self._note("get", key, out)
            if key == tally.state_key:
                tally.state_gets += 1
                tally.state_size = len(out)
            return out

        def compare_set(self, key, expected, desired):
            out = inner.compare_set(key, expected, desired)
            self._note("compare_set", key, expected, desired, out)
            if key == tally.state_key:
                tally.cas_seen += 1
                tally.state_size = len(out)
                won = bytes(out) == (desired.encode() if isinstance(desired, str) else bytes(desired))
                if tally.cas_seen > 1 and not won:  # the first is the backend's sentinel, lost or not
                    tally.cas_lost += 1
                elif tally.cas_seen > 1 and won:
                    if tally.joined:
                        tally.keep_alives += 1
                    tally.joined = True
            return out

        def add(self, key, value):
            self._note("add", key, value)
            return inner.add(key, value)

        def wait(self, keys, timeout=None):
            self._note("wait", None, keys)
            return inner.wait(keys) if timeout is None else inner.wait(keys, timeout)

        def check(self, keys):
            self._note("check", None, keys)
            return inner.check(keys)

        def multi_get(self, keys):
            out = inner.multi_get(keys)
            self._note("multi_get", None, keys, out)
            return out

        def multi_set(self, keys, values):
            self._note("multi_set", None, keys, values)
            return inner.multi_set(keys, values)

        def num_keys(self):
            return inner.num_keys()

        def delete_key(self, key):
            return inner.delete_key(key)

        def set_timeout(self, timeout):
            return inner.set_timeout(timeout)

    return CountingStore()


def _install_counting(backend: str, tally: _Tally) -> None:
    """Put the counting store under the handler torchrun builds for ``backend``."""
    if backend == "static":
        from torch.distributed.elastic.rendezvous import static_tcp_rendezvous as st

        real = st.TCPStore
        st.TCPStore = lambda *a, **k: counting_store(real(*a, **k), tally)  # type: ignore[misc]
    elif backend == "c10d":
        from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as cb

        real_create = cb._create_tcp_store
        cb._create_tcp_store = lambda params: counting_store(real_create(params), tally)  # type: ignore[assignment]


def _etcd_count(tally: _Tally) -> None:
    """etcd-v2: python-etcd's reads and writes (the requests etcd's /metrics counts server-side)."""
    import etcd

    for name in ("read", "write"):
        original = getattr(etcd.Client, name)

        def counted(self, key, *args, _original=original, _name=name, **kwargs):
            tally.calls[_name] += 1
            tally.bytes += _size(key) + sum(_size(a) for a in args[:1])
            result = _original(self, key, *args, **kwargs)
            tally.bytes += _size(getattr(result, "value", None))
            return result

        setattr(etcd.Client, name, counted)


def _agent(backend: str, endpoint: str, run_id: str, n: int, index: int, fds: tuple[int, int, int]) -> dict:
    """One forked agent: wait for the go signal, build torch's handler as torchrun would, join, take its ranks."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent, WorkerSpec
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    go, _results, _done = fds
    tally = _Tally(f"torch.rendezvous.{run_id}")
    if backend == "etcd-v2":
        _etcd_count(tally)
    else:
        _install_counting(backend, tally)
    os.read(go, 1)
    t0 = time.monotonic()
    conf: dict[str, object] = {"rank": index} if backend == "static" else {}
    if backend == "c10d":
        conf["is_host"] = "false"  # the store stands in its own process for node 0's
    params = RendezvousParameters(backend=backend, endpoint=endpoint, run_id=run_id, min_nodes=n, max_nodes=n,
                                  join_timeout="900", local_addr=LOCAL_ADDR, **conf)
    handler = get_rendezvous_handler(params)
    info = handler.next_rendezvous()
    t_joined = time.monotonic()
    spec = WorkerSpec(role="trainer", local_world_size=RANKS_PER_NODE, rdzv_handler=handler, entrypoint="true")
    workers = SimpleElasticAgent._assign_worker_ranks(None, info.store, info.rank, info.world_size, spec)  # type: ignore[arg-type]
    t1 = time.monotonic()
    return {"t0": t0, "joined": t_joined, "t1": t1, "rank": info.rank, "world": info.world_size,
            "global0": workers[0].global_rank, **tally.to_json(), "pss": pss_mb(os.getpid())}


def count_host(backend: str, n: int, timeout: float = 300.0) -> dict:
    """N forked handlers join one rendezvous (this process imported torch once); the server's trace log counts
    every request. Runs in a process of its own (``--count``): the trace log is a process-wide setting."""
    import torch.distributed.elastic.agent.server.api
    import torch.distributed.elastic.rendezvous.registry  # noqa: F401

    run_id = f"count-{backend}-{n}"
    with tempfile.TemporaryDirectory(prefix="mtk-scale-rdzv-count-") as tmp:
        log = Path(tmp) / "server.log"
        with _server_for(backend, log, Path(tmp)) as (endpoint, _pid):
            got = _fork_agents(backend, endpoint, run_id, n, timeout, log if backend == "static" else None)
            before = got.pop("_etcd_before")
            if backend == "etcd-v2":
                got["etcd_requests"] = _etcd_requests(endpoint) - before
        if backend != "etcd-v2":
            kinds, polls = server_requests(log.read_text(errors="replace"))
            got["server"] = dict(kinds)
            got["server_polls"] = dict(polls)
        return got


@contextmanager
def _server_for(backend: str, log: Path, root: Path):
    """(endpoint, pid or None): c10d's store in its own process, etcd, or nothing (static: node 0's agent)."""
    if backend == "c10d":
        with store_server(log) as (port, pid):
            yield f"127.0.0.1:{port}", pid
    elif backend == "etcd-v2":
        with etcd_server(root) as (endpoint, pid):
            yield endpoint, pid
    else:
        yield f"127.0.0.1:{free_port()}", None


def _fork_agents(backend: str, endpoint: str, run_id: str, n: int, timeout: float, rank0_log: Path | None) -> dict:
    go_r, go_w = os.pipe()
    res_r, res_w = os.pipe()
    done_r, done_w = os.pipe()
    before = _etcd_requests(endpoint) if backend == "etcd-v2" else 0.0
    pids = []
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for index in range(n):
            pid = os.fork()
            if pid == 0:  # the child never returns into the caller
                code = 1
                try:
                    os.close(go_w)
                    os.close(res_r)
                    os.close(done_w)
                    if rank0_log is not None and index == 0:  # node 0 hosts the static store: its trace log
                        fd = os.open(rank0_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                        os.dup2(fd, 2)
                    elif rank0_log is not None:
                        os.dup2(devnull, 2)  # the clients' own trace lines: not what is counted
                    report = _agent(backend, endpoint, run_id, n, index, (go_r, res_w, done_r))
                    os.write(res_w, (json.dumps(report) + "\n").encode())
                    os.read(done_r, 1)  # stay (heartbeats and all) until every agent has reported
                    code = 0
                except BaseException:
                    import traceback

                    os.write(res_w, (json.dumps({"error": traceback.format_exc()[-2000:]}) + "\n").encode())
                finally:
                    os._exit(code)
            pids.append(pid)
        os.close(res_w)
        time.sleep(0.5)  # every child is blocked on the go pipe
        t_go = time.monotonic()
        os.write(go_w, b"g" * n)
        reports = _collect(res_r, n, timeout, backend)
        assert sorted(r["rank"] for r in reports) == list(range(n)), "ranks are not 0..N-1"
        assert sorted(r["global0"] for r in reports) == [RANKS_PER_NODE * i for i in range(n)], "worker ranks"
        return {"n": n, "wall_s": max(r["t1"] for r in reports) - t_go,
                "joined_s": max(r["joined"] for r in reports) - t_go, "agents": reports, "_etcd_before": before}
    finally:
        os.write(done_w, b"d" * n)
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        for fd in (go_r, go_w, res_r, done_r, done_w, devnull):
            with suppress(OSError):
                os.close(fd)


def _collect(fd: int, n: int, timeout: float, backend: str) -> list[dict]:
    reports: list[dict] = []
    buf, deadline = b"", time.monotonic() + timeout
    while len(reports) < n:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError(f"{backend}: {len(reports)}/{n} agents joined within {timeout:.0f} s")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError(f"{backend}: an agent died; {len(reports)}/{n} joined")
        buf += chunk
        *lines, buf = buf.split(b"\n")
        reports += [json.loads(x) for x in lines if x]
        failed = [r["error"] for r in reports if "error" in r]
        if failed:
            raise RuntimeError(f"{backend}: an agent failed:\n{failed[0]}")
    return reports


def count(backend: str, n: int) -> dict:
    """``count_host`` in a process of its own (static: with the trace log on, its server is node 0's agent)."""
    env = {**os.environ, **(TRACE_ENV if backend == "static" else {})}
    with tempfile.TemporaryDirectory(prefix="mtk-scale-rdzv-") as tmp:
        out = Path(tmp) / "out.json"
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--count", backend, "--nodes", str(n),
                               "--out", str(out)], env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"{backend} at N={n}: " + (proc.stderr.strip().splitlines() or ["failed"])[-1][:300])
        return json.loads(out.read_text())


# -------------------------------------------------------------------------------------------- etcd-v2
@contextmanager
def etcd_server(root: Path):
    """A real etcd with the v2 API (Debian etcd-server), data on disk like the rendered emptyDir; yields
    (endpoint, pid)."""
    if not shutil.which("etcd"):
        raise RuntimeError("etcd is not on PATH: apt-get install etcd-server")
    client, peer = free_port(), free_port()
    proc = subprocess.Popen(["etcd", "--enable-v2", "--data-dir", str(root / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{client}",
                             "--advertise-client-urls", f"http://127.0.0.1:{client}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{client}/v2/keys/", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("etcd did not start") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{client}", proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _etcd_requests(endpoint: str) -> float:
    """etcd's own v2-store counters: reads, writes (compare-and-swap included) and watch requests."""
    text = urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("etcd_debugging_store_reads_total", "etcd_debugging_store_writes_total",
                            "etcd_debugging_store_watch_requests_total")):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -------------------------------------------------------------- service time per request, load generator
def rendezvous_state(participants: int) -> bytes:
    """The c10d state of ``participants`` joined agents as the backend stores it (base64 of the pickled
    _RendezvousState, every participant with its heartbeat), node names as a cluster's."""
    import pickle
    from base64 import b64encode
    from datetime import datetime, timezone

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

    state = _RendezvousState()
    now = datetime.now(timezone.utc)
    for i in range(participants):
        node = _NodeDesc(f"ip-10-1-{i // 250}-{i % 250}.ec2.internal", 1000 + i, 0)
        state.participants[node] = i
        state.last_heartbeats[node] = now
    return b64encode(pickle.dumps(state))


def client_cycle_s(participants: int, repeats: int = 20, batches: int = 3) -> float:
    """The winning c10d agent's own work per compare-and-set at ``participants``: what _BackendRendezvousState
    Holder.sync and the join op do with the state the store returned (decode, unpickle, sanitise, add itself,
    pickle, encode). The thread's own CPU time (not wall: time descheduled by other processes is not the work's),
    best of ``batches`` x ``repeats``."""
    import pickle
    from base64 import b64decode, b64encode
    from datetime import datetime, timezone

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc

    blob = rendezvous_state(participants)
    best = float("inf")
    for i in range(repeats * batches):
        if i and i % repeats == 0:
            time.sleep(0.2)  # batches apart: a burst of other processes' work does not decide the figure
        t0 = time.thread_time()
        state = pickle.loads(b64decode(blob))
        expire = datetime.now(timezone.utc)
        _ = [n for n, beat in state.last_heartbeats.items() if beat < expire.replace(year=2000)]  # _sanitize's scan
        me = _NodeDesc("ip-10-9-9-9.ec2.internal", 99, i)
        state.participants[me] = 0
        state.last_heartbeats[me] = expire
        b64encode(pickle.dumps(state))
        best = min(best, time.thread_time() - t0)
    return best


def service_times(sizes=SERVICE_SIZES, budget_s: float = 0.5) -> dict[str, dict[int, float]]:
    """Server CPU seconds per request, by kind and size: one libuv TCPStore server in its own process, this
    process its load generator (requests issued back to back, ``budget_s`` of them per point). The
    kinds are the mix the handlers send: connect (accept + validate + ping), add, set/get of a small value, the
    c10d state's get and compare-and-set (lost and won) at N participants, node 0's multi_get/multi_set of N keys
    (and the wait before its multi_get)."""
    import torch.distributed as dist

    out: dict[str, dict[int, float]] = {}
    with store_server() as (port, pid):
        c = dist.TCPStore("127.0.0.1", port, is_master=False, use_libuv=True)

        def per_request(fn, requests_per_call: int = 1, rounds: int = 5) -> float:
            """Best of ``rounds``: the server's CPU per request when other processes disturb it least (a shared
            core's caches and a busy sibling add to it; they are this machine's, not the request's)."""
            fn()  # warm
            best = float("inf")
            for _ in range(rounds):
                calls, c0, t0 = 0, cpu_s(pid), time.perf_counter()
                while calls < 20 or time.perf_counter() - t0 < budget_s / rounds:
                    fn()
                    calls += 1
                best = min(best, (cpu_s(pid) - c0) / (calls * requests_per_call))
            return best

        clients = []
        out["connect"] = {0: per_request(lambda: clients.append(dist.TCPStore("127.0.0.1", port, is_master=False)))}
        clients.clear()
        out["add"] = {0: per_request(lambda: c.add("init/", 1))}
        out["set"] = {0: per_request(lambda: c.set("torchelastic/role_info/0", b"x" * 64))}
        out["get+wait"] = {0: per_request(lambda: c.get("torchelastic/role_info/0"), 2)}
        for key in ("state get+wait", "state cas lost", "state cas won", "multi_get", "multi_set"):
            out[key] = {}
        for n in sizes:
            state = rendezvous_state(n)
            other = rendezvous_state(n + 1)
            c.set("st", state)
            out["state get+wait"][n] = per_request(lambda: c.get("st"), 2)
            out["state cas lost"][n] = per_request(lambda: c.compare_set("st", other, state))  # noqa: B023
            out["state cas won"][n] = per_request(lambda: c.compare_set("st", state, state))  # noqa: B023
            keys = [f"torchelastic/role_info/{i}" for i in range(n)]
            values = [b"x" * 64] * n
            out["multi_set"][n] = per_request(lambda: c.multi_set(keys, values))  # noqa: B023
            out["multi_get"][n] = per_request(lambda: c.multi_get(keys))  # noqa: B023  (with its wait: the call)
        out["state bytes"] = {n: float(len(rendezvous_state(n))) for n in sizes}
        out["client cycle"] = {n: client_cycle_s(n) for n in sizes}
    return out


# ------------------------------------------------------------------------------------ real torchrun agents
AGENT_HOOK = """\
import json, os, sys, time
if os.environ.get("MTK_BENCH_RDZV_OUT"):
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as _d, static_tcp_rendezvous as _st

    def _timing(_next):
        def _timed(self):
            t0 = time.monotonic()
            info = _next(self)
            with open(os.path.join(os.environ["MTK_BENCH_RDZV_OUT"], f"{os.getpid()}.json"), "w") as fh:
                json.dump({"t0": t0, "t1": time.monotonic()}, fh)
            return info
        return _timed

    _d.DynamicRendezvousHandler.next_rendezvous = _timing(_d.DynamicRendezvousHandler.next_rendezvous)
    _st.StaticTCPRendezvous.next_rendezvous = _timing(_st.StaticTCPRendezvous.next_rendezvous)
"""


def _wait_listening(endpoint: str, proc: subprocess.Popen) -> None:
    host, port = endpoint.rsplit(":", 1)
    while proc.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex((host, int(port))) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"node 0's agent exited ({proc.returncode}) before its store listened")


def run_agents(backend: str, endpoint: str, n: int, run_id: str, root: Path, timeout: float = 300.0) -> dict:
    """N real torchrun agents (one process each, workers are /bin/true), launched together, as mtk renders them:
    --nnodes N (min = max), the rendezvous backend, endpoint and id, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1. A
    sitecustomize hook records when each agent entered and left next_rendezvous()."""
    hook, out = root / f"hook-{run_id}", root / f"out-{run_id}"
    hook.mkdir()
    out.mkdir()
    (hook / "sitecustomize.py").write_text(AGENT_HOOK)
    env = {**os.environ, "PYTHONPATH": str(hook), "MTK_BENCH_RDZV_OUT": str(out),
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "1", "LOGLEVEL": "WARNING"}
    # static is what the Slurm backend renders: mtk's own node-side torchrun (its store keeper included), each
    # agent told its node rank as SLURM_NODEID tells it, node 0's agent hosting the store.
    program = "mtk.launcher.quiet_torchrun" if backend == "static" else "torch.distributed.run"
    argv = [sys.executable, "-m", program, "--nnodes", str(n), "--nproc-per-node", "1",
            "--rdzv-backend", backend, "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, "--max-restarts", "0",
            "--local-addr", LOCAL_ADDR]
    if backend == "c10d":
        argv += ["--rdzv-conf", "is_host=false"]  # the store stands in its own process for node 0's agent
    logs = [root / f"{run_id}-agent{i}.log" for i in range(n)]  # a file each: a full pipe would stall an agent
    t_launch = time.monotonic()
    procs = []
    for rank, log in enumerate(logs):
        node = ["--node-rank", str(rank)] if backend == "static" else []
        with open(log, "wb") as fh:
            procs.append(subprocess.Popen([*argv, *node, "--no-python", "true"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=fh))
        if backend == "static" and rank == 0:  # as for c10d and etcd, the store is up before the others come:
            _wait_listening(endpoint, procs[0])  # else their connect back-off, not the join, is what is timed
    try:
        codes = [p.wait(timeout=max(1.0, t_launch + timeout - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{backend}: {n} torchrun agents did not all finish within {timeout:.0f} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(codes):
        err = next(log.read_text(errors="replace") for log, c in zip(logs, codes, strict=True) if c)
        raise RuntimeError(f"{backend}: a torchrun agent failed ({codes}):\n{err[-2000:]}")
    reports = [json.loads(f.read_text()) for f in out.glob("*.json")]
    assert len(reports) == n, f"{len(reports)} of {n} agents reported"
    last_in = max(r["t0"] for r in reports)
    return {"n": n, "after_last_arrival_s": max(r["t1"] for r in reports) - last_in}


def _agents_once(backend: str, n: int, root: Path) -> dict:
    run_id = f"agents-{backend}-{n}"
    if backend == "static":
        return run_agents(backend, f"127.0.0.1:{free_port()}", n, run_id, root)
    with _server_for(backend, root / f"{run_id}.log", root / run_id) as (endpoint, _pid):
        return run_agents(backend, endpoint, n, run_id, root)


# ------------------------------------------------------------------------------------------------ measure
def _counts(backend: str, ns: list[int], log) -> tuple[list[dict], str]:
    rows, stop = [], ""
    for n in ns:
        try:
            rows.append(count(backend, n))
        except (RuntimeError, TimeoutError, AssertionError, subprocess.TimeoutExpired) as exc:
            stop = f"stopped at N={n}: {str(exc).splitlines()[0][:200]}"
            break
        r = rows[-1]
        log(f"  [rendezvous] {backend} N={n}: wall {r['wall_s']:.2f} s (this machine), "
            + (f"server requests {sum(r['server'].values()):,} ({sum(r['server_polls'].values())} polls)"
               if "server" in r else f"etcd requests {r.get('etcd_requests', 0):,.0f}"))
    return rows, stop


def measure(quick: bool, log=print) -> list[Series]:
    """Counts at growing N, service times, the client's cycle, this machine's wall times; the derived figures."""
    pick = 0 if quick else 1
    counted = {b: _counts(b, PLAN[b][pick], lambda *a: log(*a, flush=True)) for b in PLAN if PLAN[b][pick]}
    log("  [rendezvous] service times (load generator against one libuv TCPStore server) ...", flush=True)
    svc = _service_in_subprocess()
    walls: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="mtk-scale-rdzv-agents-") as tmp:
        for backend, (small, full) in AGENTS.items():
            walls[backend] = []
            for n in small if quick else full:
                try:
                    walls[backend].append(_agents_once(backend, n, Path(tmp)))
                except (RuntimeError, TimeoutError, AssertionError) as exc:
                    log(f"  [rendezvous] agents {backend} N={n}: {str(exc).splitlines()[0][:160]}", flush=True)
                    break
    return series(counted, svc, walls)


def _service_in_subprocess() -> dict:
    with tempfile.TemporaryDirectory(prefix="mtk-scale-rdzv-svc-") as tmp:
        out = Path(tmp) / "svc.json"
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--service", "--out", str(out)], check=True,
                       timeout=900)
        raw = json.loads(out.read_text())
        return {k: {int(n): v for n, v in d.items()} for k, d in raw.items()}


# ------------------------------------------------------------------------------- from counts to figures
def timed_requests(row: dict) -> Counter:
    """The requests of a count that depend on timing, by kind: node 0's count polls (static), and for c10d the
    lost compare-and-sets, the keep-alives and the once-a-second polls (a get: a wait and a get each)."""
    out: Counter[str] = Counter(row.get("server_polls", {}))
    agents = row["agents"]
    out["compareAndSet"] += sum(a["cas_lost"] + a["keep_alives"] for a in agents)
    polls = sum(a["polls"] for a in agents)
    out["wait"] += polls
    out["get"] += polls
    return out


def protocol_requests(row: dict) -> dict[str, float]:
    """The server's requests by kind that the protocol itself makes (all of them but the timed ones)."""
    timed = timed_requests(row)
    return {k: v - timed.get(k, 0) for k, v in row["server"].items()}


def linear_law(rows: list[dict], counts) -> dict[str, tuple[float, float]]:
    """Per kind: count(N) = a*N + b by least squares over the counted N (a: per agent, b: node 0's own)."""
    import numpy as np

    per = [counts(r) for r in rows]
    ns = np.array([r["n"] for r in rows], dtype=float)
    out = {}
    for kind in sorted({k for c in per for k in c}):
        ys = np.array([float(c.get(kind, 0)) for c in per])
        a, b = np.polyfit(ns, ys, 1)
        out[kind] = (float(a), float(b))
    return out


def _small_costs(svc: dict, nodes: int) -> dict[str, float]:
    """Server CPU per request of each kind that does not carry the c10d state (multi_*: at ``nodes`` keys)."""
    keys = nodes if nodes in svc["multi_get"] else max(svc["multi_get"])
    return {"validate": svc["connect"][0] / 2, "ping": svc["connect"][0] / 2,  # connect = accept+validate+ping
            "add": svc["add"][0], "set": svc["set"][0], "get": svc["get+wait"][0], "wait": svc["get+wait"][0],
            "multi_get": svc["multi_get"][keys], "multi_set": svc["multi_set"][keys]}


def static_figure(rows: list[dict], svc: dict, nodes: int = TARGET_NODES) -> tuple[float, str]:
    """Seconds at ``nodes`` (static_join) and the model's terms, from the counts' law and the service times."""
    law = linear_law(rows, protocol_requests)
    costs = _small_costs(svc, nodes)
    unknown = sorted(set(law) - set(costs))
    if unknown:
        raise ValueError(f"static: the server served request kind(s) the model has no cost for: {unknown}")
    requests = {k: a * nodes + b for k, (a, b) in law.items()}
    res = static_join(requests, {k: costs[k] for k in requests}, RTT_S)
    terms = ", ".join(f"{k} {requests[k]:,.0f} x {costs[k] * 1e6:.0f} us" for k in sorted(requests))
    return res.seconds, (f"{res.requests:,.0f} requests at {nodes:,} from the counted law "
                         f"({res.requests / nodes:.2f} per agent) x the server's CPU per request: {terms} = "
                         f"{res.server_busy_s:.3f} s busy; + node 0's 10 ms poll + 8 round trips of "
                         f"{RTT_S * 1e6:.0f} us")


def c10d_costs(svc: dict, factor: float = 1.0) -> Costs:
    """(handler cycle, server CAS, server state get, state bytes) as functions of the participants; ``factor``
    multiplies the measured times (what the chain does were every request that many times this run's cost)."""
    won, lost = interpolate(svc["state cas won"]), interpolate(svc["state cas lost"])
    cycle, get = interpolate(svc["client cycle"]), interpolate(svc["state get+wait"])
    return (lambda k: factor * cycle(k), lambda k: factor * max(won(k), lost(k)), lambda k: factor * get(k),
            interpolate(svc["state bytes"]))


def c10d_post_join_s(rows: list[dict], svc: dict, nodes: int = TARGET_NODES) -> float:
    """After the last join: every agent's bootstrap store info and rank assignment (the calls off the state key,
    as the server sees them), served in turn."""
    def requests(row: dict) -> Counter:
        out: Counter[str] = Counter()
        for agent in row["agents"]:
            for call, k in agent["other_calls"].items():
                for kind, m in REQUESTS_PER_CALL[call].items():
                    out[kind] += m * k
        return out

    costs = _small_costs(svc, nodes)
    return sum((a * nodes + b) * costs[k] for k, (a, b) in linear_law(rows, requests).items())


TAG = {"static": "static (Slurm, TrainJob)", "c10d": "c10d (PyTorchJob)", "etcd-v2": "etcd-v2"}


def series(counted: dict, svc: dict, walls: dict) -> list[Series]:
    out: list[Series] = []
    for backend, (rows, stop) in counted.items():
        if not rows:
            continue
        ns = [r["n"] for r in rows]
        tag = TAG[backend]
        pss = sum(a["pss"] for r in rows for a in r["agents"]) / sum(len(r["agents"]) for r in rows)
        if backend == "etcd-v2":
            out.append(Series("rendezvous", f"{tag}: etcd requests per agent (etcd's /metrics)", "requests", ns,
                              [r["etcd_requests"] / r["n"] for r in rows], note=stop, kind="machine"))
        else:
            mix: Counter[str] = Counter()
            for r in rows:
                mix.update({k: v / r["n"] / len(rows) for k, v in protocol_requests(r).items()})
            out.append(Series("rendezvous", f"{tag}: the protocol's server requests per agent", "requests", ns,
                              [sum(protocol_requests(r).values()) / r["n"] for r in rows],
                              note="counted in the server's trace log, the timed ones (below) left out; per agent by "
                                   "kind (mean over N): " + ", ".join(f"{k} {v:.2f}" for k, v in mix.most_common())
                                   + (f"; {stop}" if stop else "")))
            out.append(Series("rendezvous", f"{tag}: timed requests, all agents (this machine's timing)", "requests",
                              ns, [float(sum(timed_requests(r).values())) for r in rows], kind="machine",
                              note="static: node 0's count polls, 10 ms apart; c10d: lost compare-and-sets (how "
                                   "the agents' turns interleave on 2 cores), keep-alives (5 s) and polls (1 s) — "
                                   "at 1,024 the model computes them from the protocol"))
        if backend == "static":
            out.append(Series("rendezvous", f"{tag}: payload bytes per agent", "KB", ns,
                              [sum(a["bytes"] for a in r["agents"]) / r["n"] / 1e3 for r in rows],
                              note="keys and values of every call the handler makes from Python (CountingStore)"))
        elif backend == "c10d":
            out.append(Series("rendezvous", f"{tag}: state size read back by each request", "KB", ns,
                              [max(a["state_size"] for a in r["agents"]) / 1e3 for r in rows],
                              note="the one key every join and keep-alive compare-and-sets: every participant "
                                   "with its heartbeat, base64 of a pickle"))
        out.append(Series("rendezvous", f"{tag}: forked handlers, go to all ranks assigned", "s", ns,
                          [r["wall_s"] for r in rows], kind="machine",
                          note=f"N processes time-sharing 2 cores (mean PSS {pss:.0f} MB each): CPU starvation, "
                               "not the protocol — never extrapolated"))
    out += _service_series(svc)
    for backend, rows in walls.items():
        if rows:
            out.append(Series("rendezvous", f"{TAG[backend]} torchrun agents: all joined after the last arrival",
                              "s", [r["n"] for r in rows], [r["after_last_arrival_s"] for r in rows], kind="machine",
                              note="real torchrun processes (" + ("mtk.launcher.quiet_torchrun" if backend == "static"
                                                                  else "torch.distributed.run") + ")"))
    out += _derived(counted, svc)
    return out


def _service_series(svc: dict) -> list[Series]:
    out = []
    for kind in ("state cas lost", "state cas won", "state get+wait", "multi_get", "multi_set"):
        pts = svc[kind]
        out.append(Series("rendezvous-service", f"server CPU per request: {kind} (N participants / keys)", "us",
                          sorted(pts), [pts[n] * 1e6 for n in sorted(pts)], kind="machine",
                          note="timed at each N directly (the real state of N participants, N keys), best of 5; "
                               "get+wait: per request of the two a get sends; multi_get: per call, its wait in"))
    for kind in ("connect", "add", "set", "get+wait"):
        out.append(Series("rendezvous-service", f"server CPU per request: {kind}", "us", [1],
                          [svc[kind][0] * 1e6], kind="machine", note="size-independent; connect: accept, validate, "
                                                                     "ping"))
    out.append(Series("rendezvous-service", "c10d handler's decode/modify/encode per attempt", "ms",
                      sorted(svc["client cycle"]), [svc["client cycle"][n] * 1e3 for n in sorted(svc["client cycle"])],
                      kind="machine", note="one thread, best of 20: the winning agent's own work per link"))
    return out


def _derived(counted: dict, svc: dict, nodes: int = TARGET_NODES) -> list[Series]:
    out = []
    rows = counted.get("static", ([], ""))[0]
    if len(rows) > 1:
        secs, why = static_figure(rows, svc, nodes)
        out.append(Series("rendezvous", "static (Slurm, TrainJob): every rank assigned after the last arrival", "s",
                          [nodes], [secs], target=TARGET_S, kind="derived",
                          note=f"{why}. Anchors: torch's libuv TCPStore tutorial, 98,304 ranks initialise in ~100 s "
                               f"(~1 ms per client served: {nodes * 1e-3:.1f} s at {nodes:,}); pytorch#124982, the "
                               "rank assignment linear (4,000 hosts in ~10 s)"))
    rows = counted.get("c10d", ([], ""))[0]
    if len(rows) > 1:
        out += _derived_c10d(rows, svc, nodes)
    return out


def mtk_c10d(nodes: int) -> tuple[float, float]:
    """(join stagger, keep-alive interval) in seconds: what mtk renders for a c10d PyTorchJob of ``nodes``."""
    from mtk.k8s import manifests

    return manifests.C10D_JOIN_STAGGER_S, float(manifests.c10d_keep_alive_s(nodes))


C10D_ANCHORS = ("Anchors: pytorch#117066 (a maintainer: every participant races to compare-and-set one global "
                "state, collisions very likely), pytorch#185930 (open: back-off after a lost write, for large "
                "scale), pytorch#124982 (the rank assignment after it, linear)")


def _chain(res, post: float) -> str:
    return (f"{res.cas:,.0f} compare-and-sets ({res.failed_cas:,.0f} lost, at most {res.max_contenders:,.0f} "
            f"contending), {res.keep_alives:,.0f} keep-alives, {res.polls:,.0f} polls, {res.bytes / 1e9:.1f} GB "
            f"through the store, server busy {res.server_busy_s:.1f} s; + {post:.2f} s of rank assignment")


def _derived_c10d(rows: list[dict], svc: dict, nodes: int) -> list[Series]:
    """c10d at ``nodes``: every agent at once (the code before the stagger: a reference), as mtk renders it (joins
    staggered by replica index, its keep-alive), how far the per-request cost may grow before that fails, and a
    re-rendezvous after a failure."""
    costs = c10d_costs(svc)
    post = c10d_post_join_s(rows, svc, nodes)
    stagger, keep_alive = mtk_c10d(nodes)
    window = stagger_window_s(nodes, stagger)
    model = "Model: the one-key compare-and-set chain (scale_rendezvous_model.py), measured state size, handler " \
            "cycle and server CPU per request"
    out = []
    res = c10d_join(nodes, TORCH_JITTER_S, *costs, RTT_S)
    value = float("inf") if res.seconds_after_last_arrival is None else res.seconds_after_last_arrival + post
    out.append(Series("rendezvous", "c10d (PyTorchJob), mtk before: every node joins at once (torch's 0-0.3 s "
                      "jitter), all joined after the last arrival", "s", [nodes], [value], target=TARGET_S,
                      kind="derived",
                      note=("never completes: " + res.why if res.seconds_after_last_arrival is None
                            else _chain(res, post)) + f". {model}. {C10D_ANCHORS}"))

    res = staggered_join(nodes, stagger, costs, RTT_S, keep_alive)
    value = float("inf") if res.seconds_after_last_arrival is None else \
        window + res.seconds_after_last_arrival + post
    link = costs[0](nodes) + RTT_S + costs[1](nodes)
    load = (f"then {nodes:,} joined agents' keep-alives are {nodes / keep_alive:.0f} compare-and-sets/s of the "
            f"whole state against the chain's {1 / link:.0f}/s ({nodes / keep_alive * link:.0%} busy, all through "
            f"training; {nodes / KEEP_ALIVE_S * link:.0%} at torch's {KEEP_ALIVE_S:g} s)")
    out.append(Series("rendezvous", f"c10d (PyTorchJob) as mtk renders it: every rank assigned, from the first join "
                      f"(joins {stagger * 1e3:g} ms x replica index apart: the last {window:.1f} s after the first; "
                      f"keep_alive_interval {keep_alive:g} s)", "s", [nodes], [value], target=TARGET_S,
                      kind="derived",
                      note=(("never completes: " + res.why) if res.seconds_after_last_arrival is None else
                            f"{window:.1f} s of stagger + {res.seconds_after_last_arrival:.1f} s after the last "
                            f"arrival (its 1 s poll) + rank assignment: {_chain(res, post)}") + f"; {load}. {model}"))

    def holds(keep_alive_s: float):
        return lambda f: staggered_holds(nodes, stagger, c10d_costs(svc, f), RTT_S, keep_alive_s, f * post,
                                         TARGET_S)

    mtk_f, torch_f = highest_cost_factor(holds(keep_alive)), highest_cost_factor(holds(KEEP_ALIVE_S))
    out.append(Series("rendezvous", "c10d (PyTorchJob) as mtk renders it: the highest multiple of this run's "
                      "per-request costs at which it still completes within the target", "x", [nodes], [mtk_f],
                      kind="derived",
                      note=f"every factor 1, 1.25, ... up to it holds over the stagger's window and "
                           f"{', '.join(f'{k:g}x' for k in STAGGER_SPREADS[1:])} wider (pods that start apart); "
                           f"the same stagger with torch's keep_alive_interval "
                           f"{KEEP_ALIVE_S:g} s holds to {torch_f:g}x. This machine's busiest runs measured the "
                           "compare-and-set and the handler's cycle 1.6-1.9x its quietest"))

    def rejoin(factor: float):
        """The new round's joins: every waiting agent within its 1 s poll of the round opening."""
        return c10d_join(nodes, POLL_S, *c10d_costs(svc, factor), RTT_S, keep_alive_s=keep_alive,
                         expiry_s=3 * keep_alive)

    def rejoin_holds(factor: float) -> bool:
        after = rejoin(factor).seconds_after_last_arrival
        return after is not None and after + factor * post <= TARGET_S

    res = rejoin(1.0)
    value = float("inf") if res.seconds_after_last_arrival is None else res.seconds_after_last_arrival + post
    again_f = highest_cost_factor(rejoin_holds)
    out.append(Series("rendezvous", "c10d (PyTorchJob) as mtk renders it, a re-rendezvous after a failure: every "
                      "rank assigned after the last agent has left the old round (a lower bound)", "s", [nodes],
                      [value], kind="derived",
                      note=("never completes: " + res.why if res.seconds_after_last_arrival is None else
                            _chain(res, post)) + f"; holds to {again_f:g}x this run's per-request costs. torch opens "
                           "the new round only when every participant has left the old one (the leaving is "
                           "staggered), then every waiting agent adds itself at its next 1 s poll: a join over 1 s, "
                           "which the stagger in front of the round does not spread (its state holds all N from the "
                           "start: harder than this). No target: what mtk cannot stagger without torch's join op; "
                           "TrainJob restarts the gang with a static rendezvous instead"))
    return out


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--count", choices=sorted(PLAN), help=argparse.SUPPRESS)
    ap.add_argument("--nodes", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--service", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count:
        args.out.write_text(json.dumps(count_host(args.count, args.nodes)))
        return 0
    if args.service:
        args.out.write_text(json.dumps(service_times()))
        return 0
    from scale_core import table

    print(table(measure(args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
