"""mtk.launcher."""
