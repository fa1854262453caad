"""What benchmarks/scale.py's components hand back, and how their growth is fitted, printed and plotted.

Every component module (`benchmarks/scale_<name>.py`) exposes `measure(quick: bool) -> list[Series]`: one
Series per metric, measured at growing node counts N (ranks = 8N). Three kinds of series:

* ``measured`` (a count or a cost that does not depend on this machine's load): fitted on a log-log line
  (value = c * N^k), its law named from the exponent k, extrapolated to N = 1,024 and drawn;
* ``machine`` (a wall time of N processes time-sharing this machine's 2 cores): printed and drawn as this
  machine's limit, never fitted or extrapolated — it measures CPU starvation, not the protocol;
* ``derived`` (a figure at 1,024 computed from counts and a measured per-operation cost, its model in the note):
  printed as it is, against its target;
* ``reference`` (mtk's code before a fix, measured the same way for comparison): fitted like ``measured``, its
  target shown as what the fix was for, without a verdict (that is for mtk now). A measured series whose metric
  names the old code ("mtk before", "BEFORE") is one; a derived one that names it keeps its derived figure and
  shows its target without a verdict too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

TARGET_NODES = 1024
RANKS_PER_NODE = 8


@dataclass
class Series:
    """One metric of one component against nodes N (`n[i]` nodes gave `values[i]`, in `unit`).

    `target` (optional) is the ceiling item 2 of issue 45 sets for the 1,024-node figure, same unit. `kind`:
    "measured", "machine" or "derived" (module docstring).
    """

    component: str
    metric: str
    unit: str
    n: list[int]
    values: list[float]
    note: str = ""
    target: float | None = None
    kind: str = "measured"

    def __post_init__(self) -> None:
        if self.kind == "measured" and _BEFORE.search(self.metric):
            self.kind = "reference"
        if self.kind not in KINDS:
            raise ValueError(f"Series kind {self.kind!r}: choose from {', '.join(KINDS)}")
        if self.kind == "machine" and self.target is not None:
            raise ValueError(f"{self.metric}: a machine-bound wall time has no 1,024-node figure to hold a target")

    def at(self, nodes: int) -> float | None:
        """The figure at `nodes`: the fit's extrapolation, a derived series' own value, None for a wall time."""
        if self.kind == "machine":
            return None
        if self.kind == "derived":
            return dict(zip(self.n, self.values, strict=True)).get(nodes)
        return fit(self).at(nodes)


KINDS = ("measured", "machine", "derived", "reference")
_BEFORE = re.compile(r"\bmtk before\b|\bBEFORE\b")


@dataclass
class Fit:
    """value ≈ coef * N^exponent, least squares on log-log; `law` names the exponent.

    `poly` (highest power first), when set, is what `at` extrapolates with: a measured cost is usually a sum
    (a constant part on one node plus a linear part on every node), whose log-log slope at small N is below its
    law's and would under-state the cost at 1,024 nodes. So a series whose exponent names a law (0, 1, 2, 3) is
    extrapolated by the polynomial of that degree fitted to the points (least squares), the power law otherwise.
    """

    coef: float
    exponent: float
    law: str
    poly: tuple[float, ...] | None = None

    def at(self, n: float) -> float:
        if self.poly is not None:
            return sum(c * n ** (len(self.poly) - 1 - i) for i, c in enumerate(self.poly))
        return self.coef * n ** self.exponent


def law_name(exponent: float) -> str:
    """Constant / linear / quadratic when the exponent is within 0.25 of 0 / 1 / 2, else the power itself."""
    for k, name in ((0, "constant"), (1, "linear"), (2, "quadratic"), (3, "cubic")):
        if abs(exponent - k) <= 0.25:
            return name
    return f"N^{exponent:.2f}"


def fit(series: Series) -> Fit:
    """Least squares of log(value) on log(N) over the positive points; all-zero (or one point) is constant."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(series.n, series.values, strict=True) if n > 0 and v > 0]
    if not pts:
        return Fit(0.0, 0.0, "constant")
    if len({x for x, _ in pts}) < 2:
        return Fit(math.exp(sum(y for _, y in pts) / len(pts)), 0.0, "constant")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    k = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    power = Fit(math.exp(my - k * mx), k, law_name(k))
    degree = round(k)
    ns = [n for n, v in zip(series.n, series.values, strict=True) if n > 0 and v > 0]
    if 0 <= degree <= 3 and abs(k - degree) <= 0.25 and len(ns) > degree:
        import numpy as np

        vs = [v for n, v in zip(series.n, series.values, strict=True) if n > 0 and v > 0]
        poly = tuple(float(c) for c in np.polyfit(ns, vs, degree))
        if poly[0] > 0:  # a falling leading term would be no growth law at all: keep the power
            power.poly = poly
    return power


def _num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-2:
        return f"{v:.3g}"
    return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"


def table(all_series: list[Series], nodes: int = TARGET_NODES) -> str:
    """A plain-text table: per metric the measured points, the law with its exponent, the value at `nodes`."""
    head = ("component", "metric", "unit", "measured (N: value)", "law", "k", f"at N={nodes:,}", "target")
    rows = [head]
    for s in all_series:
        pts = ", ".join(f"{n}: {_num(v)}" for n, v in zip(s.n, s.values, strict=True))
        at = s.at(nodes)
        if s.kind in ("measured", "reference"):
            f = fit(s)
            law, k = f.law, f"{f.exponent:.2f}"
        else:
            law, k = ("this machine", "") if s.kind == "machine" else ("derived", "")
        shown = "—" if at is None else _num(at)
        if s.target is None or at is None:
            tgt = ""
        elif s.kind == "reference" or _BEFORE.search(s.metric):
            tgt = f"≤ {_num(s.target)} (the code before the fix: a reference, no verdict)"
        else:
            tgt = f"≤ {_num(s.target)} " + ("ok" if at <= s.target else "MISSED")
        rows.append((s.component, s.metric, s.unit, pts, law, k, shown, tgt))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {s.component}/{s.metric}: {s.note}" for s in all_series if s.note]
    return "\n".join(lines + (["notes:", *notes] if notes else []))


def plot(all_series: list[Series], out_dir: Path, nodes: int = TARGET_NODES) -> list[Path]:
    """One PNG per component (log-log: points, fitted line to `nodes`, target); [] when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for component in dict.fromkeys(s.component for s in all_series):
        group = [s for s in all_series if s.component == component]
        fig, ax = plt.subplots(figsize=(11, 5))
        for s in group:
            pos = [(n, v) for n, v in zip(s.n, s.values, strict=True) if v > 0]
            if not pos:
                continue
            if s.kind not in ("measured", "reference"):
                ax.plot([n for n, _ in pos], [v for _, v in pos], "*" if s.kind == "derived" else "x",
                        markersize=10 if s.kind == "derived" else 6,
                        label=f"{s.metric} ({s.unit}): " + ("derived" if s.kind == "derived" else "this machine"))
                if s.target is not None:
                    ax.axhline(s.target, color=ax.lines[-1].get_color(), linestyle=":", linewidth=1)
                continue
            f = fit(s)
            line = ax.plot([n for n, _ in pos], [v for _, v in pos], "o", label=f"{s.metric} ({s.unit}): {f.law}, "
                           f"k={f.exponent:.2f}")[0]
            xs = [min(s.n) * (nodes / min(s.n)) ** (i / 40) for i in range(41)]
            ax.plot(xs, [f.at(x) for x in xs], "--", color=line.get_color(), linewidth=1)
            if s.target is not None:
                ax.axhline(s.target, color=line.get_color(), linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(f"nodes N (ranks = {RANKS_PER_NODE}N); dashed: fit to N={nodes:,}, dotted: target, "
                      "x: this machine's wall time, *: derived")
        ax.set_title(f"{component}: measured points and fitted growth")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(True, which="both", alpha=0.3)
        path = out_dir / f"scale_{component}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
