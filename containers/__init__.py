"""mtk.containers."""
