"""Checkpoint directory bookkeeping: tracker, publish order, partial cleanup, keep_last (no torch needed)."""

from __future__ import annotations

import pytest
from mtk.training import checkpoint as ck


def _partial(root, it):
    p = root / (ck.iter_dir_name(it) + ck.PARTIAL_SUFFIX)
    p.mkdir(parents=True)
    (p / "shard").write_text("x")
    return p


def test_tracker_missing_is_none(tmp_path):
    assert ck.read_tracker(tmp_path) is None


def test_tracker_garbage_names_the_file_and_fix(tmp_path):
    (tmp_path / ck.TRACKER).write_text("latest\n")  # "release" is Megatron-LM's weights-only marker, a valid value
    with pytest.raises(ValueError, match=r"latest_checkpointed_iteration\.txt.*fix or delete"):
        ck.read_tracker(tmp_path)


def test_publish_renames_then_points_tracker(tmp_path):
    _partial(tmp_path, 10)
    final = ck.publish(tmp_path, 10)
    assert final == tmp_path / "iter_0000010" and (final / "shard").read_text() == "x"
    assert ck.read_tracker(tmp_path) == 10
    assert not (tmp_path / "iter_0000010.partial").exists()
    # no temp files left next to the tracker
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000010", ck.TRACKER]


def test_publish_replaces_an_existing_dir_of_the_same_iteration(tmp_path):
    _partial(tmp_path, 5)
    ck.publish(tmp_path, 5)
    p = _partial(tmp_path, 5)
    (p / "shard").write_text("new")
    ck.publish(tmp_path, 5)
    assert (tmp_path / "iter_0000005" / "shard").read_text() == "new"


def test_crash_before_publish_leaves_tracker_on_previous(tmp_path):
    _partial(tmp_path, 4)
    ck.publish(tmp_path, 4)
    _partial(tmp_path, 8)  # shards written, then the process died
    assert ck.read_tracker(tmp_path) == 4
    removed = ck.remove_partials(tmp_path)
    assert [p.name for p in removed] == ["iter_0000008.partial"]
    assert ck.published_iterations(tmp_path) == [4]


def test_prune_keeps_newest_and_never_the_tracked_one(tmp_path):
    for it in (1, 2, 3, 4):
        _partial(tmp_path, it)
        ck.publish(tmp_path, it)
    assert ck.prune(tmp_path, keep_last=2, protect=4) == [1, 2]
    assert ck.published_iterations(tmp_path) == [3, 4]
    assert ck.prune(tmp_path, keep_last=None, protect=4) == []
    # the protected (tracked) checkpoint survives even if it is old
    assert ck.prune(tmp_path, keep_last=1, protect=3) == []


def test_published_iterations_ignores_other_entries(tmp_path):
    (tmp_path / "iter_0000007").mkdir()
    (tmp_path / "iter_0000009.partial").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "iter_12").mkdir()
    assert ck.published_iterations(tmp_path) == [7]


def _job(**parallel_train):
    from mtk.spec import Job

    parallel = {k: v for k, v in parallel_train.items() if k in ("tp", "pp", "distributed_optimizer")}
    train = {k: v for k, v in parallel_train.items() if k == "precision"}
    return Job.model_validate({"name": "t", "model": {"preset": "tiny"}, "parallel": parallel, "train": train,
                               "cluster": {"procs_per_node": 2}})


def test_compatible_resumes_pass_with_the_plan_they_get(tmp_path):
    saved = {"topology": ck.topology(_job(tp=2, precision="fp32")), "precision": "fp32"}
    plan = ck.check_compatible(tmp_path, saved, _job(tp=1, pp=2, precision="fp32"))  # plain optimizer reshards
    assert (plan.saved.tp, plan.saved.pp, plan.now.tp, plan.now.pp) == (2, 1, 1, 2)
    assert plan.changed == {"parallel.tp": (2, 1), "parallel.pp": (1, 2)} and plan.distopt_sharding is None
    assert not plan.restore_rng, "per-rank RNG states do not map onto another layout"
    saved = {"topology": ck.topology(_job(distributed_optimizer=True)), "precision": "bf16"}
    plan = ck.check_compatible(tmp_path, saved, _job(distributed_optimizer=True, precision="fp16"))
    assert plan.changed == {} and plan.restore_rng and plan.distopt_sharding == "dp_zero_gather_scatter"


@pytest.mark.parametrize(("saved_kw", "now_kw", "msg"), [
    ({"distributed_optimizer": True}, {}, "parallel.distributed_optimizer=True"),
    ({"distributed_optimizer": True, "tp": 2}, {"distributed_optimizer": True, "pp": 2},
     "parallel.tp: .* reshards only over data-parallel ranks"),
    ({"precision": "fp32"}, {"precision": "bf16"}, "train.precision=fp32"),
])
def test_incompatible_resumes_are_refused_with_the_fix(tmp_path, saved_kw, now_kw, msg):
    saved_job = _job(**saved_kw)
    saved = {"topology": ck.topology(saved_job), "precision": saved_job.train.precision}
    with pytest.raises(RuntimeError, match=msg):
        ck.check_compatible(tmp_path, saved, _job(**now_kw))
