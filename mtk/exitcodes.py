"""Exit codes shared by the engine, the entrypoint and the cluster scripts.

The Slurm script, the PyTorchJob restart policy and ``mtk status`` all read these; change them only here.
"""

OK = 0
FAILED = 1
USAGE = 2
# The engine saved a checkpoint after SIGUSR2/SIGTERM (time limit, preemption): requeue the job.
REQUEUE = 42
# An exit trigger file (``mtk stop``) was honoured: checkpoint saved, do not requeue, cancel the chain.
STOPPED = 43
# The guardrail stopped a run that kept failing without checkpoint progress.
GUARDRAIL = 44
# The hang watchdog found a rank that stopped reporting progress: stacks are in debug/, the blamed ranks and
# nodes in state/hang.json; restart without those nodes.
HANG = 45
# The pre-flight health gate failed on at least one node (state/preflight.json names them): exclude and restart.
PREFLIGHT = 46
