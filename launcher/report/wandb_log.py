"""Optional Weights & Biases logging of a run's metrics. Never required; ``wandb`` is imported only when the
user configured it (``WANDB_API_KEY`` or ``WANDB_MODE``), so an unconfigured machine pays nothing.

The W&B run id is derived from the run name, so reporting the same run twice updates one W&B run instead of
creating a duplicate. The key is read by wandb itself from the environment; mtk never prints or stores it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from .records import Metrics

_KEYS = ("lm_loss", "lr", "grad_norm", "loss_scale", "step_time_ms", "tokens_per_s", "tflops_per_gpu")


def configured(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("WANDB_API_KEY") or env.get("WANDB_MODE"))


def log_to_wandb(metrics: Metrics, run_name: str, summary: dict) -> str | None:
    """Log the final lineage (W&B steps must increase) and eval points; returns a one-line note, or None when
    W&B is not configured (silent: most users never asked for it)."""
    if not configured():
        return None
    try:
        import wandb
    except ImportError:
        return "W&B logging skipped: wandb is not installed (pip install wandb)"
    live, _ = metrics.timeline()
    run_id = "mtk-" + hashlib.sha1(run_name.encode()).hexdigest()[:12]
    run = wandb.init(project=os.environ.get("WANDB_PROJECT", "mtk"), name=run_name, id=run_id, resume="allow",
                     job_type="report")
    try:
        evals = {r["iteration"]: r for r in metrics.eval}
        for rec in live:
            row = {f"train/{k}": rec[k] for k in _KEYS if isinstance(rec.get(k), (int, float))}
            if rec["iteration"] in evals and isinstance(evals[rec["iteration"]].get("lm_loss"), (int, float)):
                row["eval/lm_loss"] = evals[rec["iteration"]]["lm_loss"]
            run.log(row, step=rec["iteration"])
        run.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str))})
    finally:
        run.finish()
    return f"W&B: logged {len(live)} steps to run {run_id} (project {os.environ.get('WANDB_PROJECT', 'mtk')})"
