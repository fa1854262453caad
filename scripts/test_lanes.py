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

import shutil
import subprocess
import sys
import tempfile
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


def main(extra: list[str]) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="mtk-unit-lane-"))
    log = scratch / "unit.log"
    with open(log, "w") as out:
        unit = subprocess.Popen(pytest_argv("unit", extra, scratch / "tmp"), stdout=out, stderr=subprocess.STDOUT)
    try:
        print(f"make test: lane 'unit' ({LANES['unit']}) runs beside this one; its output follows at the end",
              flush=True)
        codes = {"daemons": subprocess.call(pytest_argv("daemons", extra))}
        codes["unit"] = unit.wait()
    finally:
        if unit.poll() is None:
            unit.kill()
            unit.wait()
    print(f"\n{'=' * 30} lane 'unit' ({LANES['unit']}) {'=' * 30}", flush=True)
    sys.stdout.write(log.read_text(errors="replace"))
    shutil.rmtree(scratch, ignore_errors=True)
    for lane, code in codes.items():
        print(f"make test: lane {lane!r} exited {code}", flush=True)
    failed = [code for code in codes.values() if code not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(code == NO_TESTS for code in codes.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
