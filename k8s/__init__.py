"""mtk.k8s."""
