"""Exit codes and run-dir paths shared by the engine, the entrypoint and the cluster scripts.

The Slurm script, the PyTorchJob restart policy and ``mtk status`` all read these; change them only here.
"""

from mtk import checkpoint_paths

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

# Paths inside a run dir.
JOB_FILE = "job.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = checkpoint_paths.CHECKPOINTS_DIR  # a run's own checkpoints when train.checkpoint.dir is unset
TENSORBOARD_DIR = "tensorboard"
LOGS_DIR = "logs"
DEBUG_DIR = "debug"
STATE_DIR = "state"
SAVE_TRIGGER = "triggers/save"
EXIT_TRIGGER = "triggers/exit"
HEARTBEATS_DIR = "state/heartbeats"
HANG_FILE = "state/hang.json"
# The hosts the watchdog blamed, one per line, for the Slurm script (which moves them into EXCLUDED_FILE).
HANG_HOSTS_FILE = "state/hang.hosts"
# The run's excluded nodes, one per line: host, UTC time, reason (tab-separated); every restart passes --exclude.
EXCLUDED_FILE = "state/excluded_nodes"
