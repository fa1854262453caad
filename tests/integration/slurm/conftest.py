"""A real three-node Slurm 22.05 cluster (munge + slurmctld + slurmd node1..node3 in private namespaces), started
once per session (``slurm_cluster`` and ``mtk_venv`` live in tests/conftest.py, shared with tests/journeys), plus
the environments jobs run in. Fails (never skips) when the cluster cannot start.

``harness`` drives it the way a user does: the ``mtk`` CLI in a subprocess with SLURM_CONF set.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.slurm_harness import EXAMPLES, REPO, Harness, drained, metrics

__all__ = ["EXAMPLES", "REPO", "Harness", "metrics"]

# A stand-in `mtk-entrypoint` for tests of the batch script's own logic (requeue, guardrail, signals,
# quoting on a real cluster): behaviour chosen by MTK_STUB, e.g. "sleep:30", "exit:1", "usr2:42".
STUB_ENTRYPOINT = r"""#!/bin/bash
if [ "$1" = preflight ]; then
  # The health gate's contract with the batch script (MTK_STUB_PREFLIGHT): "once:N" fails task N's node until the
  # run has excluded a node, "fail:N" fails task N's node every time; failing = its name in state/preflight.hosts
  # (written by node 0) and exit 46 on every node. Unset: every node passes.
  mode=${MTK_STUB_PREFLIGHT%%:*}
  task=${MTK_STUB_PREFLIGHT#*:}
  [ -n "$MTK_STUB_PREFLIGHT" ] || exit 0
  [ "$mode" = once ] && [ -f "$MTK_RUN_DIR/state/excluded_nodes" ] && exit 0
  echo "preflight task $SLURM_PROCID on $(hostname): port $MTK_PREFLIGHT_PORT"
  [ "$SLURM_PROCID" = "$task" ] && hostname >"$MTK_RUN_DIR/state/preflight.hosts"
  sleep 1
  exit 46
fi
printf '%s\n' "node=$(hostname) task=$SLURM_PROCID restart=${SLURM_RESTART_COUNT:-0} args=$*"
printf '%s\0' "$@" >"$MTK_RUN_DIR/stub-argv.$SLURM_NODEID"
mode=${MTK_STUB%%:*}
arg=${MTK_STUB#*:}
case "$mode" in
  exit) exit "$arg" ;;
  sleep) sleep "$arg" & wait $! ;;
  tick) for i in $(seq "$arg"); do echo "tick $i"; sleep 1; done ;;
  hang)
    # The hang watchdog's contract with the batch script: task $arg's node is blamed (state/hang.hosts) and every
    # node exits 45 (HANG); once the run has excluded nodes, the restart completes.
    [ -f "$MTK_RUN_DIR/state/excluded_nodes" ] && exit 0
    [ "$SLURM_PROCID" = "$arg" ] && hostname >"$MTK_RUN_DIR/state/hang.hosts"
    sleep 1
    exit 45 ;;
  usr2)
    trap 'echo "task $SLURM_PROCID got USR2"; exit "$arg"' USR2
    sleep 300 & wait $! ;;
  *) exit 0 ;;
esac
"""


@pytest.fixture(scope="session")
def stub_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venvs") / "stub"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text('PATH="$(dirname "${BASH_SOURCE[0]}"):$PATH"\nexport PATH\n')
    entry = venv / "bin" / "mtk-entrypoint"
    entry.write_text(STUB_ENTRYPOINT)
    entry.chmod(0o755)
    return venv


@pytest.fixture
def harness(slurm_cluster, tmp_path) -> Harness:
    h = Harness(slurm_cluster, tmp_path)
    yield h
    drained(h)


@pytest.fixture(scope="module")
def module_harness(slurm_cluster, tmp_path_factory) -> Harness:
    h = Harness(slurm_cluster, tmp_path_factory.mktemp("slurm-module"))
    yield h
    drained(h)


@pytest.fixture(scope="session")
def read_metrics():
    return metrics
