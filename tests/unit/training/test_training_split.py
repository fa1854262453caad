"""The split handed to Megatron: unused test share folded into valid; empty splits refused, not hung on."""

from __future__ import annotations

import numpy as np
import pytest
from mtk.training import compat
from mtk.training.data import check_split_documents, effective_split

from mtk.spec import validate


def job(split: str, eval_interval=None):
    return validate({"name": "s", "model": {"preset": "tiny"}, "cluster": {"procs_per_node": 1, "device": "cpu"},
                     "data": {"split": split}, "train": {"eval_interval": eval_interval}})


@pytest.mark.parametrize(("split", "sizes", "expected"), [
    ("949,50,1", [80, 16, 0], "949,51,0"),
    ("949,50,1", [80, 16, 4], "949,50,1"),
    ("98,2,0", [80, 16, 0], "98,2,0"),
    ("100,0,0", [80, 0, 0], "100,0,0"),
])
def test_effective_split_keeps_train_boundary(split, sizes, expected):
    assert effective_split(job(split), sizes) == expected


def test_empty_split_is_named_not_hung_on(tmp_path):
    compat.install_import_stubs()
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix = tmp_path / "small"
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
    for _ in range(10):
        builder.add_document(np.arange(20), [20])
    builder.finalize(f"{prefix}.idx")
    check_split_documents([str(prefix)], "90,10,0")  # 9 + 1 documents: fine
    with pytest.raises(ValueError, match=r"valid split .* none of its 10 documents"):
        check_split_documents([str(prefix)], "990,10,0")
