"""The preflight's parsers and per-node checks that need no cluster."""

from __future__ import annotations

import socket

from mtk.launcher import preflight

# nccl-tests' all_reduce_perf table (-c 1: the #wrong columns are counts); one row has wrong results.
ALL_REDUCE_PERF = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    30.12    0.00    0.00      0    29.80    0.00    0.00      0
    33554432       8388608     float     sum      -1    312.5  107.37  187.90      0    310.1  108.20  189.35      3
    67108864      16777216     float     sum      -1    601.0  111.66  195.41      1    598.7  112.09  196.16      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 128.1367
#
"""

DCGM_DIAG = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| GPU Memory                | Fail - GPU: 3                                  |
| PCIe                      | Pass                                           |
+---------------------------+------------------------------------------------+
"""


def test_all_reduce_perf_wrong_counts_and_bandwidth():
    assert preflight.parse_all_reduce_perf(ALL_REDUCE_PERF) == (4, 128.1367)
    clean = ALL_REDUCE_PERF.replace("      3\n", "      0\n").replace("      1    598.7", "      0    598.7")
    assert preflight.parse_all_reduce_perf(clean)[0] == 0


def test_dcgm_failures_are_named():
    assert preflight.parse_dcgm_diag(DCGM_DIAG) == ["GPU Memory"]


def test_storage_probe_names_the_broken_path(tmp_path):
    (tmp_path / "file").write_text("x")
    problems = preflight.storage_problems({"run dir": str(tmp_path / "ok"), "data.dir": str(tmp_path / "file" / "d")})
    assert len(problems) == 1 and problems[0].startswith(f"storage: data.dir {tmp_path / 'file' / 'd'}")
    assert not [p for p in (tmp_path / "ok").iterdir()]  # the probe file is removed


def test_group_from_torch_or_slurm_variables():
    torch_env = {"RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "h", "MASTER_PORT": "5"}
    assert preflight.group_from_environment(torch_env) == (1, 3, "h", 5)
    slurm = {"SLURM_NODEID": "2", "SLURM_NNODES": "3", "MTK_PREFLIGHT_HOST": "node1", "MTK_PREFLIGHT_PORT": "7"}
    assert preflight.group_from_environment(slurm) == (2, 3, "node1", 7)
    assert preflight.group_from_environment({"SLURM_NODEID": "0"}) is None


def test_verdict_lists_failing_hosts():
    nodes = [{"host": socket.gethostname(), "node_rank": 0, "problems": []},
             {"host": "n2", "node_rank": 1, "problems": ["storage: ..."]}]
    v = preflight.verdict(nodes)
    assert not v["ok"] and v["failed_hosts"] == ["n2"]
