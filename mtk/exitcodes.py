"""Exit codes shared by the engine, the entrypoint and the cluster scripts, and the error class that carries one.

The Slurm script, the PyTorchJob restart policy and ``mtk status`` all read these; change them only here. An
expected failure is a :class:`UserFacingError` (bad input: :class:`BadInput`): the one error boundary
(:func:`mtk.failures.report`) prints its message as one line and exits with its ``exit_code``. No verb maps an
exception to an exit code itself. An exception class outside this family is internal, and its docstring says so:
control flow its own module catches, or the signal of a bug in mtk, which the boundary shows with its traceback.
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
# `mtk launch --wait --timeout` (EKS): the deadline passed first; nothing failed and the run goes on, but a script
# that asked for "training within N" learns it did not happen (the convention of timeout(1)).
WAIT_TIMEOUT = 124
# Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130


class UserFacingError(Exception):
    """An expected failure whose message says what went wrong and what to do: printed as one line, no traceback
    (unless --debug / MTK_DEBUG=1). ``exit_code``: what the command exits with (a class or an instance may set it)."""

    exit_code: int = FAILED


class BadInput(UserFacingError):
    """Bad input (a spec, a file, a flag, a run name): the message names it and the fix; exit 2."""

    exit_code = USAGE
