"""torchrun arguments derived from local, Slurm and Kubeflow environments; bad variables are named."""

from __future__ import annotations

import pytest
from mtk.launcher.train_step import outcome, torchrun_argv
from mtk.slurm import environment as slurm_environment
from mtk.slurm.environment import expand_nodelist

from mtk import exitcodes
from mtk.rendezvous import RendezvousError, from_environment
from mtk.spec import validate


@pytest.fixture(autouse=True)
def _parsed_host_lists(monkeypatch):
    """The host lists here are made up: expand them with the parser, never by asking this machine's scontrol."""
    monkeypatch.setattr(slurm_environment, "slurm_hostnames", expand_nodelist)


def job(nodes=1, procs=2, **slurm):
    return validate(
        {
            "name": "rdzv",
            "model": {"preset": "tiny"},
            "cluster": {"nodes": nodes, "procs_per_node": procs, "device": "cpu", "slurm": slurm},
        }
    )


def opt(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_local_is_standalone():
    r = from_environment(job(), {})
    assert r.kind == "local" and "--standalone" in r.args and opt(r.args, "--nproc-per-node") == "2"


def test_multi_node_without_scheduler_is_an_error():
    with pytest.raises(RendezvousError, match="SLURM_JOB_ID"):
        from_environment(job(nodes=2), {})


SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NNODES": "2", "SLURM_NODEID": "1"}


def test_slurm_uses_first_host_and_job_id():
    r = from_environment(job(nodes=2, procs=1), SLURM)
    assert r.kind == "slurm"
    assert opt(r.args, "--rdzv-backend") == "static" and opt(r.args, "--node-rank") == "1"
    assert opt(r.args, "--rdzv-endpoint") == f"node1:{15000 + 4242 % 20000}"
    assert opt(r.args, "--rdzv-id") == "4242-0" and opt(r.args, "--nnodes") == "2"


def test_slurm_restart_gets_fresh_rendezvous_id():
    r = from_environment(job(nodes=2, procs=1), {**SLURM, "SLURM_RESTART_COUNT": "3"})
    assert opt(r.args, "--rdzv-id") == "4242-3"


def test_slurm_port_override_order():
    env = {**SLURM, "MTK_RDZV_PORT": "23456"}
    assert opt(from_environment(job(2, 1), env).args, "--rdzv-endpoint") == "node1:23456"
    assert (
        opt(from_environment(job(2, 1, rdzv_port=31000), SLURM).args, "--rdzv-endpoint")
        == "node1:31000"
    )


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"SLURM_NNODES": "two"}, "SLURM_NNODES"),
        ({"SLURM_NODEID": "2"}, "SLURM_NODEID"),
        ({"SLURM_NNODES": "3"}, "SLURM_JOB_NODELIST"),
        ({"SLURM_NODEID": ""}, "SLURM_NODEID"),
    ],
)
def test_slurm_bad_variables_are_named(changes, variable):
    with pytest.raises(RendezvousError, match=variable):
        from_environment(job(2, 1), {**SLURM, **changes})


def test_slurm_allocation_must_match_spec():
    with pytest.raises(RendezvousError, match=r"cluster\.nodes"):
        from_environment(job(4, 1), SLURM)


PET = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "1",
    "PET_RDZV_BACKEND": "etcd-v2",
    "PET_RDZV_ENDPOINT": "etcd:2379",
    "PET_RDZV_ID": "run-1",
    "PET_MAX_RESTARTS": "5",
}


def test_kubeflow_elastic_reads_operator_variables():
    r = from_environment(job(2, 1), PET)
    assert r.kind == "kubeflow-elastic"
    assert (opt(r.args, "--rdzv-backend"), opt(r.args, "--rdzv-endpoint")) == ("etcd-v2", "etcd:2379")
    assert (opt(r.args, "--rdzv-id"), opt(r.args, "--max-restarts")) == ("run-1", "5")


def test_kubeflow_elastic_min_max_nodes():
    assert opt(from_environment(job(2, 1), {**PET, "PET_NNODES": "1:2"}).args, "--nnodes") == "1:2"


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"PET_RDZV_BACKEND": ""}, "PET_RDZV_BACKEND"),
        ({"PET_RDZV_ENDPOINT": "etcd"}, "PET_RDZV_ENDPOINT"),
        ({"PET_NNODES": "x"}, "PET_NNODES"),
    ],
)
def test_kubeflow_bad_variables_are_named(changes, variable):
    with pytest.raises(RendezvousError, match=variable):
        from_environment(job(2, 1), {**PET, **changes})


def test_kubeflow_static_master():
    env = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "w-0", "PET_MASTER_PORT": "23456"}
    r = from_environment(job(2, 1), env)
    assert r.kind == "kubeflow-static" and opt(r.args, "--master-addr") == "w-0"
    assert opt(r.args, "--node-rank") == "1"


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node1", ["node1"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("gpu-[01-02,7],cpu5", ["gpu-01", "gpu-02", "gpu-7", "cpu5"]),
        ("a[9-11]", ["a9", "a10", "a11"]),
    ],
)
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


def test_torchrun_argv_runs_the_worker_module():
    argv, node = torchrun_argv(job(), "/runs/r", "/runs/r/job.json", env={}, program=["torchrun"])
    assert argv[0] == "torchrun" and node == "local"
    assert argv[-6:] == ["-m", "mtk.training.worker", "--job", "/runs/r/job.json", "--run-dir", "/runs/r"]


@pytest.mark.parametrize(
    ("rc", "last", "signalled", "expected"),
    [
        (0, None, False, 0),
        (1, {"code": exitcodes.REQUEUE}, True, exitcodes.REQUEUE),
        (1, {"code": exitcodes.STOPPED}, False, exitcodes.STOPPED),
        (1, None, True, exitcodes.FAILED),
        (7, None, False, 7),
        (1, {"code": 0}, False, 1),
        (0, {"code": exitcodes.USAGE}, False, exitcodes.USAGE),  # a refusal rank 0 stated; its workers exited 0
    ],
)
def test_outcome_prefers_engine_exit_reason(rc, last, signalled, expected):
    assert outcome(rc, last, signalled) == expected


def test_kubeflow_stop_exits_zero_so_onfailure_does_not_restart():
    assert outcome(0, {"code": exitcodes.STOPPED}, False, restarts_failed_containers=True) == exitcodes.OK
    assert outcome(0, {"code": exitcodes.REQUEUE}, True, restarts_failed_containers=True) == exitcodes.REQUEUE


def test_signals_reach_only_training_workers():
    """A fake agent with one 'rank' (LOCAL_RANK set) and one helper process: only the rank is selected."""
    import os
    import signal
    import subprocess
    import sys

    from mtk.launcher.train_step import training_workers

    # Each child says it is up (its interpreter runs, its environment is final) before the agent names them.
    child = "print('up', flush=True); import time; time.sleep(60)"
    code = (
        "import os, subprocess, sys, time\n"
        "env = dict(os.environ, LOCAL_RANK='0')\n"
        f"a = subprocess.Popen([sys.executable, '-c', {child!r}], env=env, stdout=subprocess.PIPE, text=True)\n"
        f"b = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE, text=True)\n"
        "assert a.stdout.readline() == b.stdout.readline() == 'up\\n'\n"
        "print(a.pid, b.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    agent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    rank = helper = 0
    try:
        rank, helper = map(int, agent.stdout.readline().split())
        assert training_workers(agent.pid) == [rank]
        assert helper not in training_workers(agent.pid)
    finally:
        for pid in (rank, helper):
            if pid:
                os.kill(pid, signal.SIGKILL)
        agent.kill()
        agent.wait()


def test_each_backend_parses_its_own_environment_in_precedence_order():
    """Kubeflow's variables win over Slurm's, Slurm's over this machine alone; the generic layer only asks each
    backend in turn."""
    assert from_environment(job(2, 1), {**SLURM, **PET}).kind == "kubeflow-elastic"
    assert from_environment(job(2, 1), SLURM).kind == "slurm"
    assert from_environment(job(1, 2), {}).kind == "local"


# ---- the node's place in its scheduler's job: each backend reads its own variables -----------------------------
def test_slurm_node_place_reads_the_job_the_node_and_the_requeues():
    from mtk.rendezvous import NodePlace, node_place

    env = {"SLURM_JOB_ID": "41", "SLURM_NODEID": "2", "SLURM_NNODES": "4", "SLURM_RESTART_COUNT": "3",
           "SLURM_ARRAY_TASK_ID": "5"}
    assert node_place(env) == NodePlace(job_id="41", node_rank=2, nnodes=4, restarts=3, task_index=5)
    assert node_place({"SLURM_JOB_ID": "41"}) == NodePlace(job_id="41")


def test_kubeflow_node_place_knows_the_rank_only_of_a_static_pytorchjob():
    from mtk.rendezvous import node_place

    static = node_place({"PET_NODE_RANK": "1", "PET_NNODES": "2", "POD_NAME": "run-worker-1"})
    assert (static.job_id, static.node_rank, static.nnodes, static.restarts_failed_containers) == \
        ("run-worker-1", 1, 2, True)
    elastic = node_place({"PET_NODE_RANK": "1", "PET_RDZV_ENDPOINT": "etcd:2379", "PET_NNODES": "2"})
    assert elastic.node_rank is None and elastic.restarts_failed_containers
    indexed = node_place({"JOB_COMPLETION_INDEX": "3", "POD_NAME": "prep-3"})  # a data Job's pod: no PyTorchJob
    assert (indexed.task_index, indexed.restarts_failed_containers) == (3, False)


def test_no_scheduler_is_an_empty_place_and_a_bad_index_is_named():
    from mtk.rendezvous import NodePlace, node_place

    assert node_place({"HOME": "/root"}) == NodePlace()
    with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_ID='x' is not a task index"):
        node_place({"SLURM_ARRAY_TASK_ID": "x"})
    with pytest.raises(ValueError, match="JOB_COMPLETION_INDEX='-1' is not a task index"):
        node_place({"JOB_COMPLETION_INDEX": "-1"})


# ---- a node imports the reader of its own scheduler, and no backend -------------------------------------------
def _modules_loaded_by(code: str, env: dict[str, str]) -> set[str]:
    """The mtk modules a fresh interpreter has loaded after running ``code`` with ``env`` as its environment."""
    import json
    import os
    import subprocess
    import sys

    probe = f"import json, os, sys\n{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('mtk'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"], **env})
    return set(json.loads(out.stdout.splitlines()[-1]))


NODE_STEP = ("from mtk.rendezvous import from_environment, node_place\n"
             "from mtk.spec import validate\n"
             "job = validate({'name': 'n', 'model': {'preset': 'tiny'},\n"
             "                'cluster': {'nodes': 2, 'procs_per_node': 1, 'device': 'cpu'}})\n"
             "from_environment(job, os.environ); node_place(os.environ)\n"
             "from mtk.training import lease\n"
             "lease._stale({'run_dir': 'other', 'host': 'elsewhere', 'pid': 1, 'job_id': '7', 'scheduler': "
             "os.environ.get('HOLDER', '')}, lease._holder_here('mine'))\n")
BACKENDS = {"mtk.launcher.local", "mtk.slurm.backend", "mtk.k8s.backend"}
# What every spec load imports of each backend package: the model of its cluster block (pydantic only).
SPEC_BLOCKS = {"mtk.slurm", "mtk.slurm.options", "mtk.k8s", "mtk.k8s.options"}


def test_a_slurm_node_loads_the_slurm_reader_and_no_backend():
    loaded = _modules_loaded_by(NODE_STEP, {**SLURM, "HOLDER": "slurm"})
    assert "mtk.slurm.environment" in loaded
    assert not loaded & BACKENDS and not {m for m in loaded if m.startswith("mtk.k8s")} - SPEC_BLOCKS, sorted(loaded)


def test_a_pytorchjob_pod_loads_the_kubeflow_reader_and_no_backend():
    pod = {"PET_NNODES": "2", "PET_RDZV_BACKEND": "etcd-v2", "PET_RDZV_ENDPOINT": "etcd:2379",
           "PET_NPROC_PER_NODE": "1", "POD_NAME": "run-worker-0", "HOLDER": "eks"}
    loaded = _modules_loaded_by(NODE_STEP, pod)
    assert "mtk.k8s.environment" in loaded
    assert not loaded & BACKENDS and not {m for m in loaded if m.startswith("mtk.slurm")} - SPEC_BLOCKS, sorted(loaded)


def test_a_lease_names_its_scheduler_and_only_that_one_is_asked(monkeypatch):
    """A holder recorded under Kubeflow is not looked up in Slurm's queue (a Slurm job with the same number would
    otherwise decide it); a lease from before schedulers were recorded asks every scheduler that can tell."""
    from mtk.rendezvous import job_ended, scheduler_here

    asked = []
    monkeypatch.setattr(slurm_environment, "job_ended", lambda job_id: asked.append(job_id) or True)
    assert scheduler_here(SLURM) == "slurm" and scheduler_here({"PET_NNODES": "2"}) == "eks"
    assert scheduler_here({"HOME": "/root"}) == ""
    assert not job_ended("41", "eks") and asked == []
    assert not job_ended("41", "") and asked == []  # a holder that ran under no scheduler: none can tell
    assert job_ended("41", "slurm") and asked == ["41"]
    assert job_ended("42", None) and asked == ["41", "42"]
