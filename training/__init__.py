"""mtk.training: mtk's pretraining engine on megatron.core (never ``megatron.training``).

Modules, one job each:

* ``compat``       CPU compat layer for megatron-core 0.19.2 (no-op with CUDA); pinned version check
* ``model``        TransformerConfig + GPTModel (GPT/Llama, dense/MoE, TE or local spec) from ``job.model``
* ``norms``        torch norm usable with sequence parallelism when neither Apex nor TE is present
* ``distributed``  process group + parallel_state (gloo on CPU, nccl on GPU) and seeding
* ``optim``        Float16Module/Megatron DDP, ``get_megatron_optimizer`` (Adam), LR schedule
* ``data``         mock or blended indexed datasets, the resumable sampler
* ``checkpoint``   torch_dist checkpoints, crash-safe publish + tracker, auto-resume, keep_last
* ``reshard``      which resumes at another tp/pp/dp a checkpoint allows (from its common state alone)
* ``control``      SIGTERM/SIGUSR2, save/exit triggers, ``state/last_exit.json``
* ``metrics``      iteration lines, ``metrics.jsonl`` (schema in its docstring), TensorBoard, TFLOP/s
* ``debug``        environment dump and torch.profiler window
* ``loop``         the Trainer: setup, train/eval steps, the loop and its exit codes
* ``worker``       ``python -m mtk.training.worker --job JOB.json --run-dir DIR`` (one torchrun rank)

Nothing here imports torch or megatron at module import time except inside functions, so the CLI can
import the package cheaply.
"""
