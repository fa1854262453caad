"""mtk.slurm: the Slurm backend (sbatch chains for bare venv/conda or Pyxis, status/logs/cancel, requeue and
guardrail logic in the batch script) and a two-node test cluster (:mod:`mtk.slurm.minicluster`)."""
