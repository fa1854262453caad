"""One training rank: ``python -m mtk.training.worker --job JOB.json --run-dir DIR`` (started by torchrun).

Also reachable as ``mtk-entrypoint worker``. The exit code is the engine's (``mtk.exitcodes``):
0 done, 42 saved after SIGTERM/SIGUSR2/SIGINT (requeue), 43 stopped by the exit trigger, 2 refused (one line, e.g. the
checkpoint dir is another run's), 1 failed; rank 0 also
records it in ``<run_dir>/state/last_exit.json`` because torchrun flattens worker exit codes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mtk import exitcodes

from . import compat, quiet


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="mtk-entrypoint worker", description=__doc__.splitlines()[0])
    ap.add_argument("--job", required=True, help="the run's job.json (the serialised, validated spec)")
    ap.add_argument("--run-dir", required=True, help="the run dir (metrics, checkpoints, state, triggers)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from mtk.spec import load_job_json

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    job_path = Path(args.job)
    if not job_path.is_file():
        print(f"mtk worker: --job {job_path} does not exist (expected the run's job.json)", file=sys.stderr)
        return 2
    job = load_job_json(job_path)
    quiet.for_device(job.cluster.device)
    from .loop import train

    code = train(job, Path(args.run_dir))
    if os.environ.get("MTK_UNDER_AGENT") == "1" and code in (exitcodes.REQUEUE, exitcodes.STOPPED, exitcodes.USAGE):
        # A deliberate stop, or a refusal rank 0 has already stated in one line, under torchrun: exit 0, or an
        # elastic agent restarts the workers (and torchrun prints a ChildFailedError report over the line). The
        # reason is in state/last_exit.json, which `mtk-entrypoint train` turns back into REQUEUE/STOPPED/USAGE.
        return exitcodes.OK
    return code


# The checkpoint writer re-imports this module in a spawned helper; it must find the import stubs but
# must not start training, hence the guard.
compat.install_import_stubs()
quiet.install()  # known, unactionable warnings only (see quiet.py); anything else still prints

def exit_without_teardown(code: int) -> None:
    """End the rank once every file is written and closed (``train`` closed them): non-daemon threads are joined
    and the atexit handlers run (multiprocessing stops the data loader's workers, logging flushes), as at any exit;
    the interpreter's teardown is skipped — its final garbage collection over megatron's and the model's heap and
    the gloo group's destructor cost 1.5–2 s per rank at every launch's end, with nothing left to save."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_teardown(main())
