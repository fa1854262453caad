"""Shared-filesystem traffic of mtk during training at N simulated nodes x 8 ranks (issue 45, items 1a and 2).

    python benchmarks/scale_fs.py [--quick] [--nodes 2,4,8] [--ticks 3] [--json] [--no-strace]
    python benchmarks/scale.py --only fs [--quick]

mtk's real code (the hang watchdog's ranks and node monitors, the straggler gather, the metrics writer, the run
control's trigger check, checkpoint publish + prune, the lease, the preflight health files) runs in one process
posing as N hosts x 8 ranks on one run dir and checkpoint dir, each part driven turn by turn on a scaled clock:
one turn is one of its real periods (the watchdog's 5 s interval, one iteration, one straggler gather, one save,
one attempt), so the count per turn times turns per minute is the traffic at the real periods, without waiting
for them. Counted two ways, never read off the code:

* an audit hook (``sys.addaudithook``: ``open``, ``os.rename``, ``os.listdir``/``os.scandir``, ``os.remove``,
  ``os.mkdir``) plus a wrapper around ``os.stat``, for the paths under the shared root;
* ``strace -f -y`` of the same process (when strace is installed): every system call on a shared path (opens,
  reads, writes, renames, stats, directory reads, unlinks), the figures the table uses.

The watchdog also runs as in a job, in real threads (every rank's publisher, every node's monitor) at a 0.5 s
interval up to 16 nodes, counted over whole turns of its judge: the cross-check of the turn-by-turn figure.

"before" is the watchdog and stragglers of commit BEFORE (the last one before the fix), loaded from git: it needs
the repository's history. In a clone without that commit (``git clone --depth 1``, a source archive) the "before"
rows are left out, the run says so and how to get them (``git fetch --unshallow``), and every "after" row is
measured as usual.
Quick mode stops at N = 16; the full run goes to 64 (BEFORE to 32: its straggler gather alone is 8N x 8N file
reads per turn, and strace's log of it at 64 nodes is about a gigabyte). Beyond 64 this machine runs out of
time rather than memory: the turn-by-turn drive is one thread, and 8N heartbeats + N monitors + 8N straggler
gathers per turn cost CPU linearly, the BEFORE code quadratically.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from scale_core import RANKS_PER_NODE, TARGET_NODES, Series, fit  # noqa: E402
from scale_fs_count import SYSCALLS, AuditCount, strace_counts  # noqa: E402

BEFORE = "db771a1e3eb463aa98f0dc5e5485050c28dac97f"  # the last commit before the watchdog's per-node layout (issue 45)
ITERATION_S = 1.0  # assumed step time at scale: metrics and the trigger check run every log_interval iterations
SAVE_EVERY_MIN = 30.0  # assumed checkpoint period for the publish figure
TARGET_OPS_S = 2000.0  # issue 45: the whole run at 1,024 nodes
THREADS_INTERVAL_S = 0.5  # the real-threads cross-check's scaled interval (the spec's default is 5 s)
THREADS_WINDOW_INTERVALS = 8
THREADS_UPTO = 16  # 8N publisher threads + N monitors on 2 cores: beyond this the threads miss their interval
# BEFORE's straggler gather at 64 nodes is 512 x 512 file reads per turn: ~1 GB of strace log per run. Its
# quadratic law is plain by 16 nodes.
BEFORE_UPTO = 32


# ============================================================ the parts, driven on a scaled clock
def missing_history(root: Path = ROOT) -> str:
    """Why commit BEFORE cannot be read here ("" when it can): a shallow clone or an archive lacks the history."""
    try:
        found = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{BEFORE}^{{commit}}"],
                               capture_output=True, text=True)
    except FileNotFoundError:
        return "git is not installed"
    if found.returncode == 0:
        return ""
    shallow = subprocess.run(["git", "-C", str(root), "rev-parse", "--is-shallow-repository"], capture_output=True,
                             text=True)
    where = ("this clone is shallow" if shallow.stdout.strip() == "true" else
             "this is no git checkout" if shallow.returncode else "this clone lacks it")
    return (f"the BEFORE rows need commit {BEFORE[:12]} from the repository's history and {where}: "
            "`git fetch --unshallow` (or clone without --depth) to measure them")


def _old_modules(tmp: Path):
    """The watchdog and stragglers of commit BEFORE, importable as ``scale_before.*``."""
    pkg = tmp / "before" / "scale_before"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("watchdog", "stragglers"):
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:training/{name}.py"], check=True,
                             capture_output=True, text=True).stdout
        (pkg / f"{name}.py").write_text(src)
    sys.path.insert(0, str(pkg.parent))
    import scale_before.stragglers as old_stragglers
    import scale_before.watchdog as old_watchdog

    return old_watchdog, old_stragglers


class _Cluster:
    """N hosts x 8 ranks of the watchdog (new layout or BEFORE's), each turn one heartbeat interval."""

    def __init__(self, run_dir: Path, nodes: int, spec, old=None):
        from mtk.training import hang_monitor, watchdog

        self.old = old
        wd = old or watchdog
        self.hosts = [f"simnode{i:04d}" for i in range(nodes)]
        self.beats = []
        for i, host in enumerate(self.hosts):
            for j in range(RANKS_PER_NODE):
                if old is None:
                    hb = wd.Heartbeat(run_dir, i * RANKS_PER_NODE + j, spec, host=host)
                    hb.local.mkdir(parents=True, exist_ok=True)
                else:
                    hb = wd.Heartbeat(run_dir, i * RANKS_PER_NODE + j, spec)
                    hb.host = hb.node = host
                self.beats.append(hb)
        self.monitors = ([hang_monitor.HangMonitor(run_dir, spec, host=h) for h in self.hosts] if old is None
                         else [old.HangMonitor(run_dir, spec) for _ in self.hosts])
        self.iteration = 0

    def turn(self) -> None:
        """One interval: every rank's publisher turn, then every node's monitor turn (their real loop bodies)."""
        self.iteration += 1
        for hb in self.beats:
            hb.beat("step", self.iteration)
            if self.old is None:
                hb.tick()
            elif self.old.read_verdict(hb.run_dir, since=0) is None:  # BEFORE's _publisher loop body
                hb.publish()
        for mon in self.monitors:
            if self.old is None:
                assert mon.poll() is None, "a healthy simulated run was judged hung"
            elif self.old.read_verdict(mon.run_dir, mon.started) is None:  # BEFORE's watch loop body
                assert self.old.judge(self.old.read_heartbeats(mon.run_dir, mon.started), time.time()) is None

    def close(self) -> None:
        for mon in self.monitors:
            if self.old is None:
                mon.stop()


def part_watchdog(audit, root, nodes, turns, old=None) -> Counter:
    from mtk.spec.resilience import WatchdogSpec

    cluster = _Cluster(root / "run", nodes, WatchdogSpec(), old)
    try:
        cluster.turn()  # first turn: folders made, files exist
        with audit.window(root, "watchdog") as w:
            for _ in range(turns):
                cluster.turn()
        return w.counts
    finally:
        cluster.close()


def part_watchdog_threads(audit, root, nodes, turns) -> Counter:
    """The watchdog as it runs: every rank's real publisher thread (``Heartbeat.start``) and every node's
    ``HangMonitor.watch`` in its own thread, at a scaled interval, counted over a wall-clock window and normalised
    to ``turns`` monitor turns: the cross-check of the turn-by-turn figure. The window spans whole turns of the
    judge (half the traffic) and is normalised by them, not by the clock: under strace (or a loaded machine)
    8N + N threads miss their 0.5 s interval, which would read as less traffic."""
    import threading

    from mtk.training.hang_monitor import HangMonitor
    from mtk.training.watchdog import Heartbeat

    from mtk.spec.resilience import WatchdogSpec

    spec = WatchdogSpec(interval=THREADS_INTERVAL_S)
    hosts = [f"simnode{i:04d}" for i in range(nodes)]
    beats = [Heartbeat(root / "run", i * RANKS_PER_NODE + j, spec, host=h)
             for i, h in enumerate(hosts) for j in range(RANKS_PER_NODE)]
    judged = threading.Condition()

    class Counted(HangMonitor):
        turns = 0  # the judge's finished turns

        def poll(self):
            verdict = super().poll()
            if self.judging:
                with judged:
                    Counted.turns += 1
                    judged.notify_all()
            return verdict

        @staticmethod
        def after(turn: int) -> int:
            with judged:
                judged.wait_for(lambda: Counted.turns > turn, timeout=600)
                return Counted.turns

    monitors = [Counted(root / "run", spec, host=h) for h in hosts]
    for b in beats:
        b.start()
    watchers = [threading.Thread(target=m.watch, daemon=True) for m in monitors]
    for t in watchers:
        t.start()
    try:
        time.sleep(3 * THREADS_INTERVAL_S)  # every publisher and monitor has had its first turns
        first = Counted.after(Counted.turns)  # right after a judge's turn
        with audit.window(root, "watchdog-threads") as w:
            last = first
            while last < first + THREADS_WINDOW_INTERVALS:
                last = Counted.after(last)
        polls = last - first
        assert all(t.is_alive() for t in watchers), "a monitor returned a verdict on a healthy simulated run"
    finally:
        for b in beats:
            b.stop()
        for m in monitors:
            m.stop()
    scale = turns / max(1, polls)
    counts = Counter({k: v * scale for k, v in w.counts.items()})
    counts.scale = scale  # type: ignore[attr-defined]  # the parent scales strace's count of the window alike
    return counts


def part_stragglers(audit, root, nodes, turns, old=None) -> Counter:
    """Every rank's ``receive`` of one gather (the loop calls it on every rank every ``interval`` iterations)."""
    from mtk.training import stragglers

    from mtk.spec.resilience import StragglerSpec, WatchdogSpec

    mod = stragglers if old is None else old[1]
    cluster = _Cluster(root / "run", nodes, WatchdogSpec(), None if old is None else old[0])
    cluster.turn()  # heartbeat files / node summaries exist, as in a running job
    world = nodes * RANKS_PER_NODE
    ranks = [mod.StragglerStats(StragglerSpec(), root / "run", r, world) for r in range(world)]
    vec = [1.0] * (2 * world)
    try:
        for s in ranks:
            s.receive(0, vec)  # the first gather (rank 0 learns the hosts)
        with audit.window(root, "stragglers") as w:
            for it in range(1, turns + 1):
                for s in ranks:
                    s.receive(it, vec)
        return w.counts
    finally:
        cluster.close()


def _job():
    from mtk.spec import load_job

    return load_job(str(ROOT / "examples" / "tiny.yaml"))


def part_metrics_control(audit, root, nodes, turns) -> Counter:
    """One iteration on every rank: the metrics writer's step + log (log_interval 1) and the trigger check."""
    from mtk.training.control import Control
    from mtk.training.metrics import MetricsWriter

    job, world = _job(), nodes * RANKS_PER_NODE
    writers = [MetricsWriter(job, root / "run", r, world, padded_vocab=1024) for r in range(world)]
    controls = [Control(root / "run", r) for r in range(world)]
    try:
        with contextlib.redirect_stdout(io.StringIO()), audit.window(root, "metrics") as w:
            for it in range(1, turns + 1):
                for r in range(world):
                    controls[r].local_flags(check_triggers=it % job.train.log_interval == 0)
                    writers[r].step(2.0, ITERATION_S, False)
                    if it % job.train.log_interval == 0:
                        writers[r].log(it, it * 8, 1e-4, 1.0, 1.0)
        return w.counts
    finally:
        for wr in writers:
            wr.close()


def part_checkpoint_publish(audit, root, nodes, turns) -> Counter:
    """Rank 0's publish (rename + tracker) and prune per save; the shards themselves are torch DCP's (one file per
    rank and save: linear, see benchmarks/scale_checkpoint.py)."""
    from mtk.training.checkpoint_layout import PARTIAL_SUFFIX, iter_dir_name, prune, publish

    ckpt = root / "ckpt"
    ckpt.mkdir()
    with audit.window(root, "publish") as w:
        for it in range(1, turns + 1):
            (ckpt / (iter_dir_name(it) + PARTIAL_SUFFIX)).mkdir()
            publish(ckpt, it)
            prune(ckpt, 2, protect=it)
    return w.counts


def part_attempt(audit, root, nodes, turns) -> Counter:
    """Once per attempt: every node's preflight storage check and health file, node 0's verdict files, rank 0's
    lease taken and given back (the real functions of launcher/preflight.py and training/lease.py)."""
    from mtk.launcher.preflight import storage_problems
    from mtk.training import lease

    from mtk.files import atomic_write
    from mtk.run_layout import RunLayout

    run, ckpt = root / "run", root / "ckpt"
    (run / "state").mkdir(parents=True, exist_ok=True)
    ckpt.mkdir(parents=True, exist_ok=True)
    layout = RunLayout.of(run)
    with audit.window(root, "attempt") as w:
        for _ in range(turns):
            for i in range(nodes):
                assert not storage_problems({"run dir": str(run), "train.checkpoint.dir": str(ckpt)})
                atomic_write(layout.health(f"simnode{i:04d}"), json.dumps({"host": i, "problems": []}) + "\n")
            atomic_write(layout.preflight, "{}\n")
            atomic_write(layout.preflight_hosts, "")
            me = lease.acquire(ckpt, run)
            lease.release(ckpt, me)
    atexit.unregister(lease.release)  # given back above; at exit its folder is gone
    return w.counts


# (name, what one turn is, turns per minute at the real periods, driver, variants): "after" is today's code,
# "before" commit BEFORE's, "threads" today's watchdog in real threads (a cross-check, not in the sum).
PARTS = (
    ("watchdog", "one 5 s interval", 60 / 5.0, part_watchdog, ("after", "before")),
    ("watchdog", f"one interval, real threads at {THREADS_INTERVAL_S} s", 60 / 5.0, part_watchdog_threads,
     ("threads",)),
    ("stragglers", "one gather (every 50 iterations)", 60 / (50 * ITERATION_S), part_stragglers, ("after", "before")),
    ("metrics+control", "one iteration", 60 / ITERATION_S, part_metrics_control, ("after",)),
    ("checkpoint publish", f"one save (every {SAVE_EVERY_MIN:.0f} min)", 1 / SAVE_EVERY_MIN, part_checkpoint_publish,
     ("after",)),
    ("preflight+lease", "one attempt", 0.0, part_attempt, ("after",)),
)


def child(nodes: int, turns: int, before: bool, out: Path, threads: bool = True) -> None:
    """Measure every part at ``nodes`` (one process, so strace sees it all); JSON of audit counts to ``out``."""
    audit = AuditCount()
    audit.install()
    old = None
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="mtk-scale-fs-") as tmp:
        if before:
            old = _old_modules(Path(tmp))
        for name, _, _, fn, variants in PARTS:
            for variant in variants:
                if (variant == "before" and not before) or (
                        variant == "threads" and (not threads or nodes > THREADS_UPTO)):
                    continue
                root = Path(tmp) / f"{name.replace(' ', '_').replace('+', '_')}-{variant}"
                root.mkdir()
                args = (audit, root, nodes, turns)
                before_code = None if variant != "before" else old if name == "stragglers" else old[0]  # type: ignore[index]
                counts = fn(*args) if before_code is None else fn(*args, old=before_code)
                result[f"{name}|{variant}"] = {"root": str(root), "audit": dict(counts),
                                               "scale": getattr(counts, "scale", 1.0)}
                shutil.rmtree(root, ignore_errors=True)
    out.write_text(json.dumps(result))


# ============================================================ the parent: strace, per-minute figures, series
def run_child(nodes: int, turns: int, before: bool, use_strace: bool, threads: bool = True) -> dict[str, dict]:
    with tempfile.TemporaryDirectory(prefix="mtk-scale-fs-parent-") as tmp:
        out, log = Path(tmp) / "out.json", Path(tmp) / "strace.log"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(nodes), "--turns", str(turns),
               "--out", str(out)] + (["--before"] if before else []) + ([] if threads else ["--no-threads"])
        if use_strace:
            cmd = ["strace", "-f", "-qq", "-y", "-e", f"trace={SYSCALLS}", "-o", str(log), *cmd]
        subprocess.run(cmd, check=True, cwd=ROOT)
        result = json.loads(out.read_text())
        if use_strace:
            traced = strace_counts(log, {k: v["root"] for k, v in result.items()})
            for k, v in result.items():
                v["strace"] = {kind: n * v["scale"] for kind, n in traced[k].items()}
        return result


def per_minute(counts: dict, turns: int, rate: float) -> float:
    return sum(counts.values()) / turns * rate


def measure_points(node_counts: list[int], turns: int, before_upto: int, use_strace: bool,
                   log=print, threads: bool = True) -> dict[int, dict]:
    why = missing_history() if before_upto else ""
    if why:
        log(f"  [fs] {why}; measuring the after rows only", flush=True)
        before_upto = 0
    points = {}
    for n in node_counts:
        t0 = time.monotonic()
        points[n] = run_child(n, turns, n <= before_upto, use_strace, threads)
        log(f"  [fs] N={n}: measured in {time.monotonic() - t0:.0f} s", flush=True)
    return points


def to_series(points: dict[int, dict], turns: int, counter: str) -> list[Series]:
    """Per part: ops/s of the whole run (component ``fs``) and per node (``fs-node``) at the real periods; the
    once-per-attempt parts per attempt (``fs-attempt``); the sum of the parts' fits at 1,024 with the target."""
    series: list[Series] = []
    ns = sorted(points)
    total_at = 0.0
    for name, what, rate, _, variants in PARTS:
        for variant in variants:
            key = f"{name}|{variant}"
            have = [n for n in ns if key in points[n]]
            if not have:
                continue
            vals = [per_minute(points[n][key][counter], turns, rate) / 60 if rate else
                    sum(points[n][key][counter].values()) / turns for n in have]
            unit = "ops/s" if rate else "ops/attempt"
            label = name + {"before": " BEFORE", "threads": " (real threads)"}.get(variant, "")
            kinds: Counter[str] = Counter()
            for n in have:
                kinds.update(points[n][key][counter])
            mix = ", ".join(f"{k} {v * 100 / max(1, sum(kinds.values())):.0f}%" for k, v in kinds.most_common(5))
            group = "fs" if rate else "fs-attempt"
            series.append(Series(group, label, unit, have, vals, f"one turn = {what}; {mix or 'no operations'}"))
            series.append(Series(f"{group}-node" if rate else group, f"{label} per node", unit, have,
                                 [v / n for v, n in zip(vals, have, strict=True)]))
            if variant == "after" and rate and len(have) > 1:
                total_at += fit(series[-2]).at(TARGET_NODES)
    series.append(Series("fs", "all parts (after)", "ops/s", [TARGET_NODES], [total_at],
                         f"NOT measured at {TARGET_NODES:,}: the sum of each part's own fit there; counted by "
                         f"{counter}", target=TARGET_OPS_S))
    return series


def measure(quick: bool) -> list[Series]:
    """benchmarks/scale.py's entry: N = 2..16 (quick) or 2..64, BEFORE up to 16 (quick) or 32."""
    use_strace = shutil.which("strace") is not None
    nodes = [2, 4, 8, 16] if quick else [2, 4, 8, 16, 32, 64]
    turns = 2 if quick else 4
    points = measure_points(nodes, turns, 16 if quick else BEFORE_UPTO, use_strace)
    return to_series(points, turns, "strace" if use_strace else "audit")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", default=None, help="comma-separated node counts (default: quick or full set)")
    ap.add_argument("--turns", type=int, default=None, help="turns counted per part (default 2 quick, 4 full)")
    ap.add_argument("--before-upto", type=int, default=None, help=f"BEFORE up to this N (default {BEFORE_UPTO})")
    ap.add_argument("--no-strace", action="store_true", help="count with the audit hook only")
    ap.add_argument("--no-threads", action="store_true", help="skip the real-threads cross-check (wall-clock bound)")
    ap.add_argument("--json", action="store_true", help="print the measured points as JSON (audit and strace)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--before", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    turns = args.turns or (2 if args.quick else 4)
    if args.child is not None:
        child(args.child, turns, args.before, args.out, threads=not args.no_threads)
        return 0
    nodes = [int(x) for x in args.nodes.split(",")] if args.nodes else (
        [2, 4, 8, 16] if args.quick else [2, 4, 8, 16, 32, 64])
    use_strace = not args.no_strace and shutil.which("strace") is not None
    points = measure_points(nodes, turns, args.before_upto or min(max(nodes), BEFORE_UPTO), use_strace,
                            log=lambda *a, **k: print(*a, file=sys.stderr, **k), threads=not args.no_threads)
    if args.json:
        print(json.dumps({str(n): p for n, p in points.items()}))
        return 0
    from scale_core import table

    print(table(to_series(points, turns, "strace" if use_strace else "audit")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
