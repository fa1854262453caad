"""What 1,024 nodes x 8 GPUs cost mtk, component by component: mtk's real code at simulated scale (issue 45).

On demand, never in CI:
    python benchmarks/scale.py [--quick] [--only fs,rendezvous,judge,checkpoint,launcher] [--out DIR]
Each component (benchmarks/scale_<name>.py, `measure(quick) -> list[Series]`) measures its cost at growing
node counts N (ranks = 8N); this driver fits each series' growth law (log-log, exponent printed), extrapolates
it to N = 1,024 (or prints a figure derived there, or a wall time as this machine's limit: scale_core.py), prints
one table and writes one PNG per component under --out: a new temporary folder unless given (the committed plots
in benchmarks/scale-out/ change only when asked for: ``--out benchmarks/scale-out``). A component whose module is
not there yet is named and skipped; one that fails is reported and the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale_core import Series, plot, table  # noqa: E402

COMPONENTS = ("fs", "rendezvous", "judge", "checkpoint", "launcher")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer node counts and shorter windows (minutes)")
    ap.add_argument("--only", default=",".join(COMPONENTS), help="comma-separated components (default: all)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where the PNG plots go (default: a new temporary folder, printed; the committed ones are "
                         "benchmarks/scale-out)")
    args = ap.parse_args()
    wanted = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in COMPONENTS]
    if unknown:
        print(f"error: --only: unknown component(s) {', '.join(unknown)}; choose from {', '.join(COMPONENTS)}",
              file=sys.stderr)
        return 2
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="mtk-scale-out-"))
    print(f"plots go to {out}", flush=True)
    results: list[Series] = []
    failed = []
    for name in wanted:
        if not (HERE / f"scale_{name}.py").exists():
            print(f"[{name}] benchmarks/scale_{name}.py is not there: skipped", flush=True)
            continue
        start = time.monotonic()
        print(f"[{name}] measuring ({'quick' if args.quick else 'full'}) ...", flush=True)
        try:
            got = importlib.import_module(f"scale_{name}").measure(args.quick)
        except Exception:  # one component's failure must not hide the others' figures
            traceback.print_exc()
            failed.append(name)
            continue
        print(f"[{name}] {len(got)} series in {time.monotonic() - start:.0f} s", flush=True)
        results.extend(got)
    if results:
        print()
        print(table(results))
        pngs = plot(results, out)
        print("\nplots: " + (", ".join(str(p) for p in pngs) if pngs else "none (matplotlib not importable)"))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
