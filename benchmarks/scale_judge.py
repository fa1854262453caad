"""The hang watchdog when its judge's node dies (issue 51, item 3): shared-filesystem operations per interval and
the verdict's delay, at N nodes x 8 ranks, mtk now and BEFORE.

    python benchmarks/scale_judge.py [--quick] [--nodes 2,4,8] [--json]
    python benchmarks/scale.py --only judge [--quick]

mtk's real code — every rank's ``Heartbeat`` (its publisher turn, ``tick``), every node's ``HangMonitor.poll`` and,
on a verdict, ``record`` as ``mtk-entrypoint train`` calls it — in one process posing as N hosts on one run dir,
driven interval by interval on a clock of its own (``time.time`` replaced: an interval takes no wall time, the
figures do not depend on this machine). At the start every rank begins an iteration, then none finishes it: a
hang. The judge's node (the one holding rank 0) is killed — its monitor never polls again — or, for the
reference, left alive. Each interval every live rank publishes and every live monitor polls; verdicts are
recorded after the interval's polls (in a job they poll at the same moment, so none sees another's verdict in the
same interval). Operations on the shared run dir are counted with the audit hook of scale_fs_count.py (``open``,
``os.rename``, ``os.scandir``, ...; the heartbeats themselves are node-local). BEFORE is
``training/hang_monitor.py`` at commit BEFORE, driven the same way.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from scale_core import RANKS_PER_NODE, Series  # noqa: E402
from scale_fs_count import AuditCount  # noqa: E402

BEFORE = "90280a8fc80c6488f28c3e6966669d4148b1dd3c"  # main before issue 51: every late node judged alone
INTERVAL_S = 5.0  # the spec's default heartbeat interval
STEP_TIMEOUT_S = 2 * INTERVAL_S


class Clock:
    """``time.time`` for the drive: moves only when told to."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _before_module(tmp: Path):
    """training/hang_monitor.py of commit BEFORE, importable beside today's heartbeat_files (same file format)."""
    pkg = tmp / "judge_before"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{_before_commit()}:training/hang_monitor.py"],
                         check=True, capture_output=True, text=True).stdout
    (pkg / "hang_monitor.py").write_text(src)
    for today in ("heartbeat_files.py", "refusal.py"):  # today's summaries and what they import
        (pkg / today).write_text((ROOT / "training" / today).read_text())
    sys.path.insert(0, str(tmp))
    import judge_before.hang_monitor as old

    return old


def _before_commit() -> str:
    """BEFORE, or its unique prefix where a clone lacks the full name (a shallow one fails clearly at git show)."""
    return BEFORE


def drive(root: Path, nodes: int, monitor_cls, judge_alive: bool, audit: AuditCount, clock: Clock,
          max_intervals: int = 60) -> dict:
    """One hang at ``nodes`` nodes: per interval, the shared operations; the interval of the first verdict and of
    the last node's adoption (intervals after the ranks' deadline)."""
    from mtk.training.watchdog import Heartbeat

    from mtk.spec.resilience import WatchdogSpec

    spec = WatchdogSpec(interval=INTERVAL_S, step_timeout=STEP_TIMEOUT_S)
    run = root / "run"
    hosts = [f"simnode{i:04d}" for i in range(nodes)]
    beats = [Heartbeat(run, i * RANKS_PER_NODE + j, spec, host=h) for i, h in enumerate(hosts)
             for j in range(RANKS_PER_NODE)]
    monitors = [monitor_cls(run, spec, host=h) for h in hosts]
    for b in beats:
        b.local.mkdir(parents=True, exist_ok=True)
        b.beat("step", 1)  # every rank begins iteration 1 and none finishes it
    deadline = clock.now + STEP_TIMEOUT_S
    live = monitors if judge_alive else monitors[1:]
    live_beats = beats if judge_alive else beats[RANKS_PER_NODE:]
    ops: list[int] = []
    first = adopted = None
    done: set[int] = set()
    try:
        for b in beats:
            b.tick()
        for m in monitors:  # one healthy interval: every node's summary exists, the judge has judged once
            assert m.poll() is None, "a healthy interval was judged hung"
        with audit.window(root, "healthy") as w:
            clock.now += INTERVAL_S / 10  # still before the deadline
            for m in live:
                m.poll()
        healthy = sum(w.counts.values())
        for _ in range(max_intervals):
            clock.now += INTERVAL_S
            for b in live_beats:
                b.tick()
            got = {}
            with audit.window(root, "interval") as w:
                for i, m in enumerate(live):
                    if i in done:
                        continue
                    verdict = m.poll()
                    if verdict is not None:
                        got[i] = verdict
                for i, verdict in got.items():  # the entrypoint records what watch() returned
                    live[i].record(verdict)
            ops.append(sum(w.counts.values()))
            late = round((clock.now - deadline) / INTERVAL_S)
            if got and first is None:
                first = late
            done |= set(got)
            if len(done) == len(live):
                adopted = late
                break
    finally:
        for m in monitors:
            m.stop()
    return {"healthy": healthy, "ops": ops, "worst": max(ops), "first_verdict": first, "all_adopted": adopted}


def child(node_counts: list[int], out: Path) -> None:
    """Every (N, code, judge alive or killed) in this one process (the audit hook cannot be removed)."""
    from mtk.training.hang_monitor import HangMonitor

    audit = AuditCount()
    audit.install()
    clock = Clock()
    time.time = clock  # type: ignore[assignment]  # every module's time.time() reads the drive's clock
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="mtk-scale-judge-") as tmp:
        old = _before_module(Path(tmp))
        for n in node_counts:
            for code, cls in (("after", HangMonitor), ("before", old.HangMonitor)):
                for alive in (True, False):
                    root = Path(tmp) / f"{code}-{n}-{'alive' if alive else 'killed'}"
                    root.mkdir()
                    result[f"{n}|{code}|{'alive' if alive else 'killed'}"] = drive(root, n, cls, alive, audit, clock)
    out.write_text(json.dumps(result))


def run(node_counts: list[int]) -> dict:
    with tempfile.TemporaryDirectory(prefix="mtk-scale-judge-parent-") as tmp:
        out = Path(tmp) / "out.json"
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", ",".join(map(str, node_counts)),
                        "--out", str(out)], check=True, cwd=ROOT)
        return json.loads(out.read_text())


def to_series(points: dict) -> list[Series]:
    """The healthy interval (linear), the judge-killed worst interval's operations beyond a healthy one (constant
    now, quadratic BEFORE), the verdict's delay; at 1,024 the worst interval is the sum of the two fits."""
    from scale_core import TARGET_NODES, fit

    ns = sorted({int(k.split("|")[0]) for k in points})

    def pt(n: int, code: str, alive: str) -> dict:
        return points[f"{n}|{code}|{alive}"]

    healthy = Series("judge", "healthy interval (judge alive), mtk now", "ops", ns,
                     [float(pt(n, "after", "alive")["healthy"]) for n in ns],
                     note="4N+1: each node's summary (open, rename) and verdict check (open), the judge's scan and "
                          "N reads")
    out = [healthy]
    for code, label in (("after", "mtk now"), ("before", "BEFORE")):
        raw = ", ".join(f"{n}: {pt(n, code, 'killed')['worst']}" for n in ns)
        delays = ", ".join(f"{n}: {pt(n, code, 'killed')['first_verdict']}/{pt(n, code, 'killed')['all_adopted']}"
                           for n in ns)
        out.append(Series("judge", f"judge killed: worst interval's operations beyond a healthy one, {label}", "ops",
                          ns, [float(pt(n, code, "killed")["worst"] - pt(n, "after", "alive")["healthy"]) for n in ns],
                          note=f"worst interval (N: ops) {raw}; verdict / every node adopted it, intervals after the "
                               f"deadline (N: first/all) {delays}"))
    extra = out[1]
    worst = fit(healthy).at(TARGET_NODES) + fit(extra).at(TARGET_NODES)
    out.append(Series("judge", "judge killed: worst interval, mtk now", "ops", [TARGET_NODES], [worst], kind="derived",
                      note="the healthy interval's fit plus the failover's extra operations' fit"))
    out.append(Series("judge", "judge killed: intervals from the deadline to the verdict, mtk now", "intervals", ns,
                      [float(pt(n, "after", "killed")["first_verdict"] or 0) for n in ns],
                      note="FALLBACK_INTERVALS + TAKEOVER_INTERVALS; judge alive: "
                           + ", ".join(str(pt(n, "after", "alive")["first_verdict"]) for n in ns)
                           + "; BEFORE (every late node judging): "
                           + ", ".join(str(pt(n, "before", "killed")["first_verdict"]) for n in ns)))
    return out


def measure(quick: bool) -> list[Series]:
    """benchmarks/scale.py's entry: N = 2..16 (quick) or 2..64."""
    return to_series(run([2, 4, 8, 16] if quick else [2, 4, 8, 16, 32, 64]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", default=None, help="comma-separated node counts (default: quick or full set)")
    ap.add_argument("--json", action="store_true", help="print the measured points as JSON")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child([int(x) for x in args.child.split(",")], args.out)
        return 0
    nodes = [int(x) for x in args.nodes.split(",")] if args.nodes else (
        [2, 4, 8, 16] if args.quick else [2, 4, 8, 16, 32, 64])
    points = run(nodes)
    if args.json:
        print(json.dumps(points))
        return 0
    from scale_core import table

    print(table(to_series(points)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
