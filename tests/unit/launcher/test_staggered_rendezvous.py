"""c10d joins staggered by node index (issue 51): a PyTorchJob pod's replica index becomes its wait before each
rendezvous round, through the train step's torchrun argv into mtk's ``mtk-c10d`` backend (torch's own c10d handler
inside); no other rendezvous waits."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from mtk.launcher import preflight, staggered_rendezvous
from mtk.launcher.store_keeper import store_place
from mtk.launcher.train_step import torchrun_argv
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from mtk.rendezvous import RendezvousError, from_environment
from mtk.spec import validate
from tests.support.minicluster import free_ports

PET = {"PET_NNODES": "4", "PET_NPROC_PER_NODE": "1", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "r-rdzv:29400",
       "PET_RDZV_ID": "r", "PET_MAX_RESTARTS": "3", "PET_RDZV_CONF": "mtk_join_stagger=0.025"}


def job(nodes: int = 4):
    return validate({"name": "stagger", "model": {"preset": "tiny"},
                     "cluster": {"nodes": nodes, "procs_per_node": 1, "device": "cpu"}})


def conf_of(args: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in args[args.index("--rdzv-conf") + 1].split(","))


def delay_of(args: list[str]) -> float:
    """The wait mtk-c10d makes before each round for this argv (the handler's own reading of its conf)."""
    conf = conf_of(args)
    params = RendezvousParameters(backend=args[args.index("--rdzv-backend") + 1], endpoint="h:1", run_id="r",
                                  min_nodes=1, max_nodes=1, **conf)
    return staggered_rendezvous.join_delay_s(params)[0]


@pytest.mark.parametrize("index", [0, 1, 3])
def test_a_pytorchjob_pods_replica_index_is_its_wait_before_each_round(index):
    argv, _ = torchrun_argv(job(), "/fsx/runs/r", "/etc/mtk/job.json", env={**PET, "MTK_REPLICA_INDEX": str(index)},
                            program=["torchrun"])
    assert argv[argv.index("--rdzv-backend") + 1] == "mtk-c10d"
    assert conf_of(argv) == {"mtk_join_stagger": "0.025", "mtk_join_index": str(index)}
    assert delay_of(argv) == pytest.approx(0.025 * index)


def test_the_rest_of_the_conf_reaches_torchs_handler_and_a_stale_index_is_replaced():
    env = {**PET, "PET_RDZV_CONF": "keep_alive_interval=15,mtk_join_stagger=0.025,mtk_join_index=9",
           "MTK_REPLICA_INDEX": "2"}
    args = from_environment(job(), env).args
    assert args[args.index("--rdzv-conf") + 1] == "keep_alive_interval=15,mtk_join_stagger=0.025,mtk_join_index=2"


def test_no_stagger_asked_no_wait_and_torchs_own_backend():
    """A PyTorchJob's c10d without mtk's conf (another tool's manifest), etcd, a TrainJob's (or a static
    PyTorchJob's) rendezvous: torchrun gets the backend as it was and nothing of mtk's, even where the pod has an
    index."""
    plain = {k: v for k, v in PET.items() if k != "PET_RDZV_CONF"}
    etcd = {**plain, "PET_RDZV_BACKEND": "etcd-v2", "PET_RDZV_ENDPOINT": "r-etcd:2379"}
    trainjob = {"PET_NNODES": "4", "PET_NODE_RANK": "3", "PET_MASTER_ADDR": "r-node-0-0.r", "PET_MASTER_PORT": "29500"}
    for env, backend in ((plain, "c10d"), (etcd, "etcd-v2"), (trainjob, "static")):
        args = from_environment(job(), {**env, "MTK_REPLICA_INDEX": "3"}).args
        assert "mtk-c10d" not in args and not any("mtk_join" in a for a in args), env
        assert "--rdzv-conf" not in args
        assert (args[args.index("--rdzv-backend") + 1] if "--rdzv-backend" in args else "static") == backend


@pytest.mark.parametrize(("env", "named"), [
    ({}, "MTK_REPLICA_INDEX"),
    ({"MTK_REPLICA_INDEX": "w-1"}, "MTK_REPLICA_INDEX"),
    ({"MTK_REPLICA_INDEX": "1", "PET_RDZV_CONF": "mtk_join_stagger=soon"}, "mtk_join_stagger"),
    ({"MTK_REPLICA_INDEX": "1", "PET_RDZV_CONF": "mtk_join_stagger"}, "PET_RDZV_CONF"),
    ({"MTK_REPLICA_INDEX": "1", "PET_RDZV_BACKEND": "etcd-v2"}, "only a c10d rendezvous"),
])
def test_a_stagger_that_cannot_be_honoured_is_refused_by_name(env, named):
    with pytest.raises(RendezvousError, match=named):
        from_environment(job(), {**PET, **env})


def test_the_store_keeper_knows_the_staggered_backend_hosts_a_c10d_store():
    place = store_place(["--nnodes", "4", "--rdzv-backend", "mtk-c10d", "--rdzv-endpoint", "127.0.0.1:1234",
                         "--rdzv-conf", "is_host=true,mtk_join_stagger=0.025,mtk_join_index=0", "x.py"])
    assert place is not None and (place.port, place.nodes, place.hosts_here) == (1234, 4, True)


def test_the_preflight_meets_staggered_like_training():
    env = {"MTK_PREFLIGHT_RDZV": "r-rdzv:29401", "MTK_PREFLIGHT_RDZV_BACKEND": "c10d",
           "MTK_PREFLIGHT_RDZV_ID": "r-preflight", "MTK_PREFLIGHT_NODES": "4",
           "MTK_PREFLIGHT_RDZV_CONF": "keep_alive_interval=15,mtk_join_stagger=0.025", "MTK_REPLICA_INDEX": "3"}
    assert preflight.rendezvous_from_environment(env) == (
        "r-rdzv:29401", "r-preflight", 4, "mtk-c10d",
        {"keep_alive_interval": "15", "mtk_join_stagger": "0.025", "mtk_join_index": "3"})
    etcd = {**env, "MTK_PREFLIGHT_RDZV_BACKEND": "etcd-v2"}
    del etcd["MTK_PREFLIGHT_RDZV_CONF"]
    assert preflight.rendezvous_from_environment(etcd)[3:] == ("etcd-v2", {})


def test_real_c10d_handlers_wait_their_index_then_join_one_world(monkeypatch):
    """Three of torch's real c10d handlers behind mtk-c10d, one hosting the store: each records the wait it makes
    (index x stagger) before joining, all three meet in one world, and torch's handler got the rest of the conf
    (keep_alive_interval)."""
    waits: list[tuple[str, float]] = []
    monkeypatch.setattr(staggered_rendezvous, "_sleep",
                        lambda s: waits.append((threading.current_thread().name, s)))
    staggered_rendezvous.register()
    (port,) = free_ports(1)
    handlers, infos, errors = {}, {}, []

    def make(index: int):
        params = RendezvousParameters(backend="mtk-c10d", endpoint=f"127.0.0.1:{port}", run_id="stagger",
                                      min_nodes=3, max_nodes=3, local_addr="127.0.0.1", join_timeout="60",
                                      is_host="true" if index == 0 else "false", keep_alive_interval="15",
                                      mtk_join_stagger="0.5", mtk_join_index=str(index))
        return get_rendezvous_handler(params)

    def join(index: int):
        try:
            infos[index] = handlers[index].next_rendezvous()
        except Exception as exc:  # reported below, with the thread's name
            errors.append(f"{index}: {exc!r}")

    handlers[0] = make(0)  # the host first: its store must listen before the others connect
    handlers.update({i: make(i) for i in (1, 2)})
    threads = [threading.Thread(target=join, args=(i,), name=f"node{i}") for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        assert not errors and len(infos) == 3, errors
        assert sorted(waits) == [("node1", 0.5), ("node2", 1.0)]  # index 0 joins at once
        assert sorted(info.rank for info in infos.values()) == [0, 1, 2]
        assert {info.world_size for info in infos.values()} == {3}
        for h in handlers.values():
            assert h.get_backend() == "mtk-c10d" and h.get_run_id() == "stagger"
            assert h.inner.settings.keep_alive_interval == timedelta(seconds=15)
    finally:
        for h in handlers.values():
            h.shutdown()
