"""The numbers people quote from a run, computed from its metrics records.

Definitions (so anyone can recompute them from ``metrics.jsonl``):

* final loss / final eval loss: ``lm_loss`` of the last train / eval record in the file;
* median tokens/s and TFLOP/s per GPU: median over every train record (work redone after a restart was
  real work, so it counts as a throughput sample);
* TFLOP/s convention: how the run counted its FLOPs (``flops_convention`` of the train records: Megatron-LM's
  ``num_floating_point_operations``, causal attention; records without it counted full attention, 4-12% more);
* MFU: median TFLOP/s per GPU ÷ the GPU's dense bf16 peak (``gpus.PEAKS``), only when the GPU is known;
* restarts and iterations lost: see ``records``;
* stragglers: ranks named in ``stragglers`` records (``mtk.training.stragglers``), with how many gathers named
  them and their worst forward time relative to the median.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from .gpus import Gpu
from .records import Metrics


@dataclass
class Summary:
    final_iteration: int | None
    train_records: int
    eval_records: int
    final_loss: float | None
    final_eval_loss: float | None
    final_eval_iteration: int | None
    median_tokens_per_s: float | None
    median_tflops_per_gpu: float | None
    flops_convention: str
    gpu: str
    gpu_source: str
    peak_tflops: float | None
    mfu: float | None
    restarts: int
    iterations_lost: int
    skipped_iterations: int
    nan_iterations: int
    stragglers: list[dict] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ended: str = ""  # how training ended (the engine's state/last_exit.json), set by build_report
    runs: list[dict] = field(default_factory=list)  # a job's history: the run dirs read, oldest first

    def to_dict(self) -> dict:
        """JSON-safe: NaN/inf become null (strict JSON readers reject NaN)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def _median(metrics: Metrics, key: str) -> float | None:
    vals = [v for _, v in metrics.values(key)]
    return statistics.median(vals) if vals else None


def _last_number(records: list[dict], key: str) -> float | None:
    """``key`` of the last record that has it (NaN kept: a run that ended in NaN must say so)."""
    for rec in reversed(records):
        v = rec.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


CONVENTIONS = {
    "megatron-lm": "Megatron-LM's num_floating_point_operations (causal attention)",
    None: "full attention (written before mtk counted as Megatron-LM: 4-12% above Megatron-LM's figure)",
}


def flops_convention(train: list[dict]) -> tuple[str, str | None]:
    """(what the TFLOP/s figures count, a note when the records disagree)."""
    seen = {rec.get("flops_convention") for rec in train if "tflops_per_gpu" in rec}
    if not seen:
        return "unknown (no train record has tflops_per_gpu)", None
    names = [CONVENTIONS.get(c, f"'{c}' (unknown to this mtk)") for c in sorted(seen, key=str)]
    if len(names) == 1:
        return names[0], None
    return "mixed", "train records count FLOPs in different conventions (" + "; ".join(names) + \
        "): their median mixes them"


def summarize(metrics: Metrics, gpu: Gpu) -> Summary:
    notes = list(metrics.notes)
    live, _ = metrics.timeline()
    last_eval = metrics.eval[-1] if metrics.eval else None
    final_loss = _last_number(metrics.train, "lm_loss")
    if final_loss is not None and not math.isfinite(final_loss):
        notes.append("the last train record has a non-finite lm_loss (the run ended diverged)")
    tokens = _median(metrics, "tokens_per_s")
    tflops = _median(metrics, "tflops_per_gpu")
    for key, value in (("tokens_per_s", tokens), ("tflops_per_gpu", tflops)):
        if value is None and metrics.train:
            notes.append(f"no train record has '{key}': its median is unknown")
    convention, mixed = flops_convention(metrics.train)
    if mixed:
        notes.append(mixed)
    mfu = tflops / gpu.peak_tflops if tflops is not None and gpu.peak_tflops else None
    if mfu is None and tflops is not None:
        notes.append(f"MFU unknown: GPU peak not known ({gpu.source})")
    return Summary(
        final_iteration=live[-1]["iteration"] if live else None,
        train_records=len(metrics.train),
        eval_records=len(metrics.eval),
        final_loss=final_loss,
        final_eval_loss=_last_number(metrics.eval, "lm_loss"),
        final_eval_iteration=last_eval["iteration"] if last_eval else None,
        median_tokens_per_s=tokens,
        median_tflops_per_gpu=tflops,
        flops_convention=convention,
        gpu=gpu.name,
        gpu_source=gpu.source,
        peak_tflops=gpu.peak_tflops,
        mfu=mfu,
        restarts=len(metrics.restarts),
        iterations_lost=metrics.iterations_lost,
        skipped_iterations=int(sum(r.get("skipped") or 0 for r in live if isinstance(r.get("skipped"), int))),
        nan_iterations=int(sum(r.get("nan") or 0 for r in live if isinstance(r.get("nan"), int))),
        stragglers=straggler_table(metrics.stragglers),
        notes=notes,
        runs=list(metrics.runs),
    )


def straggler_table(records: list[dict]) -> list[dict]:
    """One row per rank any gather named: rank, host, times named / gathers, worst ratio to the median."""
    named: dict[int, dict] = {}
    for rec in records:
        for entry in rec.get("slowest_ranks", []):
            if entry.get("rank") in rec.get("stragglers", []):
                row = named.setdefault(entry["rank"], {"rank": entry["rank"], "host": entry.get("host", "?"),
                                                       "named": 0, "gathers": len(records), "worst_ratio": 0.0})
                row["named"] += 1
                row["worst_ratio"] = max(row["worst_ratio"], float(entry.get("ratio", 0.0)))
    return sorted(named.values(), key=lambda r: (-r["named"], -r["worst_ratio"]))


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    if value is None:
        return "unknown"
    if not math.isfinite(value):
        return "nan"
    return f"{value:{spec}}{unit}"


def rows(s: Summary) -> list[tuple[str, str]]:
    """(label, value) pairs shared by the terminal and Markdown renderings."""
    eval_at = f" (iteration {s.final_eval_iteration})" if s.final_eval_iteration is not None else ""
    if s.gpu == "unknown":
        gpu = f"unknown ({s.gpu_source})"
    else:
        peak = "peak unknown" if s.peak_tflops is None else f"peak {s.peak_tflops:g} TFLOP/s bf16"
        gpu = f"{s.gpu} ({peak}; from {s.gpu_source})"
    runs = [("runs", f"{len(s.runs)}: " + "; ".join(_run_span(r) for r in s.runs))] if s.runs else []
    return [
        *runs,
        ("ended", s.ended or "unknown"),
        ("final iteration", "unknown" if s.final_iteration is None else str(s.final_iteration)),
        ("final loss", _fmt(s.final_loss, ".4f")),
        ("final eval loss", _fmt(s.final_eval_loss, ".4f") + (eval_at if s.final_eval_loss is not None else "")),
        ("median tokens/s", _fmt(s.median_tokens_per_s, ",.0f")),
        ("median TFLOP/s per GPU", _fmt(s.median_tflops_per_gpu, ".4g")),
        ("TFLOP/s counted as", s.flops_convention),
        ("GPU", gpu),
        ("MFU", _fmt(None if s.mfu is None else s.mfu * 100, ".1f", "%")),
        ("restarts", str(s.restarts)),
        ("iterations lost to restarts", str(s.iterations_lost)),
        ("skipped / NaN iterations", f"{s.skipped_iterations} / {s.nan_iterations}"),
        ("stragglers", "; ".join(f"rank {r['rank']} ({r['host']}) in {r['named']}/{r['gathers']} gathers, up to "
                                 f"{r['worst_ratio']:.2f}x median forward" for r in s.stragglers) or "none"),
    ]


def _run_span(r: dict) -> str:
    """``tiny-20261128-090000 (iterations 11-20)``: one run dir's part of a job's history."""
    if r.get("first_iteration") is None:
        return f"{r['run']} (no train records: {r.get('why') or 'none logged'})"
    return f"{r['run']} (iterations {r['first_iteration']}-{r['last_iteration']})"


def to_text(s: Summary) -> str:
    width = max(len(k) for k, _ in rows(s))
    lines = [f"{k:<{width}}  {v}" for k, v in rows(s)]
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines)


def to_markdown(s: Summary, title: str) -> str:
    lines = [f"# {title}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v.replace('|', '/')} |" for k, v in rows(s)]
    if s.plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in s.plots]
    if s.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in s.notes]
    return "\n".join(lines) + "\n"
