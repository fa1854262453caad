"""`make test`: the whole suite as two pytest sessions at once, one per lane.

Why: measured on the 2-core reference machine, a third of its CPU idles through the integration tier (daemons
scheduling, single-threaded process starts, one-rank runs), while the tier without daemons (tests/unit: pure logic,
fuzzing, a few short torchrun and megatron-core imports) needs ~3.5 min of mostly one core. Running that lane beside
the other fills the idle time instead of adding its minutes at the end.

- ``daemons``: every test marked ``integration`` or driving the Slurm cluster, dockerd or etcd
  (tests/support/cost.py marks them); its output streams here as it runs.
- ``unit``: the complement; its output is kept in a file and printed once both lanes are done.

The lanes split one collection by complementary marker expressions, so every test runs exactly once; each lane has
its own temporary dir and pytest cache. Extra arguments go to both sessions (``make test PYTEST_ARGS=...``). The
exit status is the first failing lane's (a lane that selects no test is not a failure).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAEMONS = "integration or slurm or docker or etcd"
LANES = {"daemons": DAEMONS, "unit": f"not ({DAEMONS})"}
NO_TESTS = 5  # pytest's exit status when a selection is empty


def pytest_argv(lane: str, extra: list[str], basetemp: Path | None = None) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "tests", "-m", LANES[lane], "--durations=25"]
    if "no:cacheprovider" not in extra:  # each lane its own --last-failed record
        argv += ["-o", f"cache_dir=.pytest_cache/{lane}"]
    if basetemp is not None:
        argv += ["--basetemp", str(basetemp)]
    return [*argv, *extra]


def streamed(argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` with its output passed through as it comes (pytest's progress dots included); return its exit
    status and the last of its output (where pytest's summary line is)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout
    assert out is not None
    tail = b""
    try:
        for chunk in iter(lambda: out.read1(65536), b""):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            tail = (tail + chunk)[-8192:]
    finally:
        code = proc.wait()
    return code, tail.decode(errors="replace")


SUMMARY = re.compile(r"^=+ (.+) in [\d.]+s(?: \([\d:]+\))? =+$", re.M)
COUNT = re.compile(r"(\d+) (\w+)")


def counts(output: str) -> dict[str, int]:
    """The counts of pytest's final summary line (``3 passed, 1 failed, 2 deselected``)."""
    lines = SUMMARY.findall(output)
    return {word: int(n) for n, word in COUNT.findall(lines[-1])} if lines else {}


def combined(lanes: dict[str, dict[str, int]], seconds: float) -> str:
    """One summary line for the whole suite, as pytest writes it (deselected left out: each lane deselects the
    other lane's tests)."""
    total: dict[str, int] = {}
    for found in lanes.values():
        for word, n in found.items():
            if word != "deselected":
                total[word] = total.get(word, 0) + n
    order = ["failed", "passed", "skipped", "xfailed", "xpassed", "warnings", "warning", "error", "errors"]
    words = sorted(total, key=lambda w: order.index(w) if w in order else len(order))
    body = ", ".join(f"{total[w]} {w}" for w in words) or "no tests ran"
    each = "; ".join(f"{lane}: " + ", ".join(f"{n} {w}" for w, n in found.items() if w != "deselected")
                     for lane, found in lanes.items())
    return f"{'=' * 10} {body} in {seconds:.2f}s (two lanes at once: {each}) {'=' * 10}"


def main(extra: list[str]) -> int:
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="mtk-unit-lane-"))
    log = scratch / "unit.log"
    with open(log, "w") as out:
        unit = subprocess.Popen(pytest_argv("unit", extra, scratch / "tmp"), stdout=out, stderr=subprocess.STDOUT)
    try:
        print(f"make test: lane 'unit' ({LANES['unit']}) runs beside this one; its output follows at the end",
              flush=True)
        code, tail = streamed(pytest_argv("daemons", extra))
        codes = {"daemons": code, "unit": unit.wait()}
    finally:
        if unit.poll() is None:
            unit.kill()
            unit.wait()
    print(f"\n{'=' * 30} lane 'unit' ({LANES['unit']}) {'=' * 30}", flush=True)
    unit_output = log.read_text(errors="replace")
    sys.stdout.write(unit_output)
    shutil.rmtree(scratch, ignore_errors=True)
    for lane, lane_code in codes.items():
        print(f"make test: lane {lane!r} exited {lane_code}", flush=True)
    print(combined({"daemons": counts(tail), "unit": counts(unit_output)}, time.monotonic() - start), flush=True)
    failed = [c for c in codes.values() if c not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(c == NO_TESTS for c in codes.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
