"""mtk.slurm: the Slurm backend (sbatch chains for bare venv/conda or Pyxis, status/logs/cancel, requeue and
guardrail logic in the batch script)."""
