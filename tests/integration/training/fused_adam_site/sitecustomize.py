"""Put on PYTHONPATH by test_attention_backends.py: every process of the run plans torch's fused Adam, which mtk
chooses on GPUs only, so a CPU run can prove that checkpoints cross between the fused and the foreach kernel."""

from mtk.training import device_plan

device_plan.adam_choice = lambda gpu, te, apex: "torch-fused"
