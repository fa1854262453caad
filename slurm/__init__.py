"""mtk.slurm."""
