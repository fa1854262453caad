"""mtk.data_jobs."""
