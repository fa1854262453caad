"""mtk.training."""
