"""Fault injection for crash-safety tests, loaded by every Python process whose PYTHONPATH starts here.

The shipped package reads no test switch: a test that wants a crash puts this folder first on the ranks'
PYTHONPATH (see :func:`support.faults.crash_env`) and names the fault in ``MTK_FAULT``:

    save:N            SIGKILL rank 0 after the shards of iteration N are written and before they are published
    slow-shard:T:S    in Slurm array task T, sleep S seconds after each preprocess shard (so a test can kill
                      that task between two shards of its slice however fast the machine is)
"""

from __future__ import annotations

import os
import signal

_FAULT = os.environ.get("MTK_FAULT", "")

if _FAULT.startswith("save:"):
    _at = int(_FAULT.split(":", 1)[1])
    from mtk.training import checkpoint as _checkpoint

    _publish = _checkpoint.publish

    def _publish_or_die(root, iteration):
        if iteration == _at:
            print(f"[fault] MTK_FAULT={_FAULT}: killing rank 0 before publishing iteration {iteration}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return _publish(root, iteration)

    _checkpoint.publish = _publish_or_die

if _FAULT.startswith("slow-shard:"):
    _task, _seconds = _FAULT.split(":")[1:3]
    if os.environ.get("SLURM_ARRAY_TASK_ID") == _task:
        import time

        from mtk.data_jobs import preprocess as _preprocess
        from mtk.data_jobs import preprocess_worker as _preprocess_worker

        _process_shard = _preprocess_worker.process_shard

        def _slow_process_shard(*args, **kwargs):
            result = _process_shard(*args, **kwargs)
            time.sleep(float(_seconds))
            return result

        # the coordinator calls it inline (one worker), pool processes through the worker module
        _preprocess.process_shard = _preprocess_worker.process_shard = _slow_process_shard
