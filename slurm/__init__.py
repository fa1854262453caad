"""mtk.slurm: the Slurm backend (sbatch chains for bare venv/conda or Pyxis, status/logs/cancel, requeue and
guardrail logic in the batch script); the two-node test cluster
that drives it in tests lives in ``tests/support/minicluster.py``."""
