"""The structure a cached save plan is checked against (training/save_structure.py): every field megatron-core's
plan depends on is in it, tensor data is not, and the log line names what changed."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def sharded():
    from mtk.training import compat

    compat.install()
    import torch
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    def make(rows=8, dtype="float32", axis=0, replica=0, key="a", fill=0.0):
        t = torch.full((rows, 4), fill, dtype=getattr(torch, dtype))
        st = ShardedTensor.from_rank_offsets(key, t, (axis, 0, 2), replica_id=replica)
        return {"model": {key: st}, "extra": ShardedObject("extra", {"x": fill}, (2,), (0,))}

    return make


def test_values_do_not_change_the_structure_and_every_plan_field_does(sharded):
    from mtk.training.save_structure import structure

    base = structure(sharded())
    assert structure(sharded(fill=3.0)) == base  # new values, same plan
    for changed in (dict(rows=12), dict(dtype="bfloat16"), dict(axis=1), dict(replica=1), dict(key="b")):
        assert structure(sharded(**changed)) != base, changed


def test_the_difference_names_keys_added_removed_and_the_field_that_changed(sharded):
    from mtk.training.save_structure import difference, structure

    a = structure(sharded())
    assert difference(a, a + structure(sharded(key="b"))[:1]) == "added b"
    assert difference(a + structure(sharded(key="b"))[:1], a) == "removed b"
    assert difference(a, structure(sharded(rows=12))) == "changed a: global_shape 16x4 → 24x4"
    assert difference(a, structure(sharded(dtype="bfloat16"))) == "changed a: dtype float32 → bfloat16"
    many = a + [s for k in "bcdef" for s in structure(sharded(key=k))[:1]]
    assert difference(a, many) == "added b, c, d and 2 more"
