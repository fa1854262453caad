"""Folder mixtures: discovery, validation, the table, and sampled shares measured from Megatron's blend."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from mtk.mixture import MixtureError, expand_folders, format_table, mixture_rows
from mtk.spec.data import DataSpec


def _write_prefix(megatron_indexed, prefix: Path, docs: int, seed: int, dtype=np.uint16) -> int:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    builder = megatron_indexed.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    tokens = 0
    for _ in range(docs):
        n = int(rng.integers(20, 200))
        builder.add_document(rng.integers(0, 500, n), [n])
        tokens += n
    builder.finalize(f"{prefix}.idx")
    return tokens


@pytest.fixture(scope="module")
def folders(tmp_path_factory, megatron_indexed) -> tuple[Path, dict[str, int]]:
    root = tmp_path_factory.mktemp("mix")
    tokens = {
        "web/part-0": _write_prefix(megatron_indexed, root / "web" / "part-0", 300, 1),
        "web/sub/part-1": _write_prefix(megatron_indexed, root / "web" / "sub" / "part-1", 100, 2),
        "code/all": _write_prefix(megatron_indexed, root / "code" / "all", 150, 3),
    }
    return root, tokens


def test_weights_split_by_tokens_and_table(folders):
    root, tokens = folders
    data = DataSpec(dir=str(root), folders=[{"path": "web", "weight": 0.8}, {"path": "code", "weight": 0.2}])
    lines: list[str] = []
    pairs = expand_folders(data, log=lines.append)
    got = {os.path.relpath(p, root): w for p, w in pairs}
    web = tokens["web/part-0"] + tokens["web/sub/part-1"]
    assert got["web/part-0"] == pytest.approx(0.8 * tokens["web/part-0"] / web)
    assert got["web/sub/part-1"] == pytest.approx(0.8 * tokens["web/sub/part-1"] / web)
    assert got["code/all"] == pytest.approx(0.2)
    table = lines[0]
    assert f"{web:,}" in table and f"{tokens['code/all']:,}" in table and "80.00%" in table and "20.00%" in table
    assert format_table(mixture_rows(data)) == table


def test_validation_names_the_file(tmp_path, folders, megatron_indexed):
    root, _ = folders
    lonely = tmp_path / "lonely"
    _write_prefix(megatron_indexed, lonely / "a", 5, 4)
    os.unlink(lonely / "a.idx")
    with pytest.raises(MixtureError, match=r"a\.idx is missing"):
        mixture_rows(DataSpec(folders=[{"path": str(lonely)}]))
    wide = tmp_path / "wide"
    _write_prefix(megatron_indexed, wide / "b", 5, 5, dtype=np.int32)
    with pytest.raises(MixtureError, match=r"mix token dtypes: int32 \(e\.g\. .*wide/b\.idx\), uint16"):
        mixture_rows(DataSpec(folders=[{"path": str(wide)}, {"path": str(root / "code")}]))
    torn = tmp_path / "torn"
    _write_prefix(megatron_indexed, torn / "c", 5, 6)
    with open(torn / "c.bin", "r+b") as fh:
        fh.truncate(10)
    with pytest.raises(MixtureError, match=r"c\.bin has 10 bytes"):
        mixture_rows(DataSpec(folders=[{"path": str(torn)}]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(MixtureError, match=r"no \.bin/\.idx prefixes"):
        mixture_rows(DataSpec(folders=[{"path": str(tmp_path / "empty")}]))


def test_sampled_token_shares_follow_folder_weights(tmp_path, folders, megatron_indexed):
    """200 iterations x global batch 8 drawn through BlendedMegatronDatasetBuilder; shares from its indices."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    root, _ = folders
    data = DataSpec(dir=str(root), folders=[{"path": "web", "weight": 0.8}, {"path": "code", "weight": 0.2}])
    pairs = expand_folders(data)
    samples = 200 * 8
    config = GPTDatasetConfig(
        random_seed=1234, sequence_length=32, blend=([p for p, _ in pairs], [w for _, w in pairs]),
        split="1,0,0", path_to_cache=str(tmp_path / "cache"), tokenizer=NullTokenizer(500, eod_id=499),
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False,
        mid_level_dataset_surplus=0.005)
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()
    which = np.asarray(train.dataset_index[:samples])
    folder_of = ["web" if "/web/" in p else "code" for p, _ in pairs]
    tokens = {"web": 0, "code": 0}
    for ds_id, count in zip(*np.unique(which, return_counts=True), strict=True):
        tokens[folder_of[int(ds_id)]] += int(count) * (config.sequence_length + 1)
    total = sum(tokens.values())
    assert abs(tokens["web"] / total - 0.8) <= 0.03
    assert abs(tokens["code"] / total - 0.2) <= 0.03
    assert len(set(which.tolist())) == 3, "every prefix of the blend is sampled"


def test_unfinished_preprocess_in_a_folder_is_named(tmp_path, megatron_indexed):
    _write_prefix(megatron_indexed, tmp_path / "src" / "done", 5, 7)
    (tmp_path / "src" / "next.mtk-parts").mkdir()
    (tmp_path / "src" / "next.mtk-parts" / "shard-000000.text.bin").write_bytes(b"\0\0")
    with pytest.raises(MixtureError, match=r"next\.mtk-parts: an unfinished preprocess"):
        mixture_rows(DataSpec(folders=[{"path": str(tmp_path / "src")}]))
