"""What a followed local run shows (launcher/follow_filter.py, issue 44): torchrun's banner and agent lines, its
failure report and every traceback frame stay in the log; a traceback's exception line is shown once, with a
pointer to the log. The input is the shape of a real train.log (torch 2.13's torchrun, two ranks)."""

from __future__ import annotations

from launcher.follow_filter import FollowFilter

LOG = """\
mtk: node vm (local) restart 0: python -m torch.distributed.run --standalone --nproc-per-node 2 -m mtk.training.worker

*****************************************
Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being \
overloaded, please further tune the variable for optimal performance in your application as needed.
*****************************************
[mtk] training iterations 1..30, 4 micro-batches per step
 iteration        1/      30 | lm loss: 6.944154E+00 |
W1128 08:33:22.387000 7800 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down
[rank0]: Traceback (most recent call last):
[rank0]:   File "/work/main/training/loop.py", line 358, in run
[rank0]:     losses, skipped, grad_norm = self.train_step()
[rank0]: RuntimeError: DataLoader worker (pid 7977) is killed by signal: Terminated.
[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/main/training/loop.py", line 358, in run
[rank1]: RuntimeError: DataLoader worker (pid 7977) is killed by signal: Terminated.
Traceback (most recent call last):
  File "torch/distributed/run.py", line 10, in main
    raise SignalException(...)

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "torch/distributed/run.py", line 12, in main
torch.distributed.elastic.multiprocessing.api.SignalException: Process 7800 got signal: 15
============================================================
mtk.training.worker FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  exitcode  : 1 (pid: 7806)
============================================================
mtk: node local torchrun exited 1; step exit code 1
"""


def test_only_the_runs_own_lines_and_each_exception_once_reach_the_follower():
    shown = list(FollowFilter("runs/x/logs/train.log")(LOG.splitlines(keepends=True)))
    assert shown == [
        "mtk: node vm (local) restart 0: python -m torch.distributed.run --standalone --nproc-per-node 2 "
        "-m mtk.training.worker\n",
        "\n",
        "[mtk] training iterations 1..30, 4 micro-batches per step\n",
        " iteration        1/      30 | lm loss: 6.944154E+00 |\n",
        "RuntimeError: DataLoader worker (pid 7977) is killed by signal: Terminated.\n",
        "(tracebacks left out here: the full log is runs/x/logs/train.log; MTK_DEBUG=1 shows them)\n",
        "mtk: node local torchrun exited 1; step exit code 1\n",
    ]


def test_a_plain_traceback_keeps_its_exception_line_and_lines_after_it():
    log = ["Traceback (most recent call last):\n", '  File "x.py", line 1, in <module>\n',
           "ValueError: boom\n", "next line\n"]
    assert list(FollowFilter("log")(log)) == [
        "ValueError: boom\n", "(tracebacks left out here: the full log is log; MTK_DEBUG=1 shows them)\n",
        "next line\n"]
