"""A sharded preprocess on the real two-node cluster: a 4-task job array over JSONL + .zst + Parquet whose
merged prefix is byte-identical to one process over the same documents and which the tiny GPT then trains on;
an array task killed mid-shard is redone alone (its finished shards kept) when the run is launched again."""

from __future__ import annotations

import json
import subprocess
import sysconfig
from pathlib import Path

import pytest
from support.faults import ShardHold

pytestmark = pytest.mark.integration

TRAIN = {"iterations": 4, "eval_interval": None, "checkpoint.save_interval": 4, "lr_warmup_iters": 1}


def _docs() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [p.read_text(encoding="utf-8", errors="replace")[:20000] for p in sorted(stdlib.glob("*.py"))[:150]]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_formats):
    """data dir with vocab/merges and a multi-format corpus; plus the single-process reference output."""
    from mtk.data_jobs.preprocess import PreprocessConfig, preprocess
    from tokenizers import ByteLevelBPETokenizer

    from mtk.spec.data import TokenizerSpec

    root = tmp_path_factory.mktemp("array data")
    docs = _docs()
    data = root / "data"
    corpus_formats.write_multiformat(data / "corpus", docs, row_group_rows=4)
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(docs[:40], vocab_size=900, special_tokens=["<|endoftext|>"], show_progress=False)
    tok.save_model(str(data))
    ref = corpus_formats.write_reference(root / "all.jsonl", docs)
    spec = TokenizerSpec(type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")
    out = preprocess(PreprocessConfig(input=str(ref), output_prefix=str(root / "ref" / "c"), tokenizer=spec,
                                      data_dir=str(data), workers=1, progress=False), log=lambda _m: None)
    return data, {ext: Path(out["outputs"]["text"][ext]).read_bytes() for ext in ("bin", "idx")}


def _spec(harness, data: Path, name: str, **corpus) -> Path:
    return harness.spec(name, mock=False, train=TRAIN, data={
        "dir": str(data), "num_workers": 0,
        "corpus": {"input": "corpus", "output_prefix": f"{name}/c", "json_keys": ["text"], "workers": 1,
                   "shards": 4, **corpus}})


def _task_logs(run: Path, array_id: str) -> dict[int, str]:
    return {i: (run / "logs" / f"preprocess-{array_id}_{i}.out").read_text() for i in range(4)}


def test_four_task_array_merges_byte_identical_and_training_reads_it(harness, mtk_venv, dataset):
    data, ref = dataset
    run = harness.launch(_spec(harness, data, "array", shard_mb=0.2), f"cluster.slurm.venv={mtk_venv}")
    ids = harness.run_record(run)["ids"]
    assert list(ids) == ["preprocess", "train"]
    done = harness.wait_state(run, {"COMPLETED"}, timeout=900)
    assert done["exit_code"] == 0
    for ext in ("bin", "idx"):
        assert (data / "array" / f"c_text_document.{ext}").read_bytes() == ref[ext]
    logs = _task_logs(run, ids["preprocess"])
    hosts = {i: text.splitlines()[0] for i, text in logs.items()}
    assert all(f"task {i} of 4:" in text and ": 0 of " not in text for i, text in logs.items())
    assert sum("preprocess: done:" in text for text in logs.values()) == 1, "one task merged"
    assert "node1" in " ".join(hosts.values()) and "node2" in " ".join(hosts.values()), "tasks ran on both nodes"
    from mtk.spec import load_job_json

    assert load_job_json(run / "job.json").data.corpus_prefixes() == [f"{data}/array/c_text_document"]
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    assert {m.get("iteration") for m in metrics} >= {1, 2, 3, 4}
    one = harness.mtk("logs", str(run), "--step", "preprocess", "--node", "2").stdout
    assert "task 2 of 4:" in one and "task 1 of 4:" not in one
    on_node2 = harness.mtk("logs", str(run), "--step", "preprocess", "--node", "node2").stdout
    assert on_node2.count(" of 4: ") == sum("on node2 (" in h for h in hosts.values()) >= 1
    status = harness.mtk("status", str(run)).stdout
    assert "merged, tasks 4/4 done, slowest task" in status


def test_killed_array_task_is_redone_alone_on_relaunch(harness, mtk_venv, dataset):
    data, ref = dataset
    spec = _spec(harness, data, "killed", shard_mb=0.05, max_parallel=4)
    # Task 1 waits after its first shard (a test-only hook) until it is killed there, on any machine speed.
    hold = ShardHold(harness.root / "hold", count=1, task=1)
    run = harness.launch(spec, f"cluster.slurm.venv={mtk_venv}", env=hold.env())
    array_id = harness.run_record(run)["ids"]["preprocess"]
    parts = data / "killed" / "c.mtk-parts"
    manifest = parts / "manifest.json"
    harness.wait("the plan", manifest.exists, timeout=300, every=0.05)
    from mtk.data_jobs.corpus import Shard
    from mtk.data_jobs.sharding import owner

    shards = [Shard(**s) for s in json.loads(manifest.read_text())["plan"]["shards"]]
    own = owner(shards, 4)
    of_1 = [s.index for s in shards if own[s.index] == 1]
    assert len(of_1) >= 4

    def task1_done() -> int:
        return sum((parts / f"shard-{i:06d}.done").exists() for i in of_1)

    harness.wait("task 1 to wait after a shard", hold.held, timeout=300)
    harness.slurm("scancel", "--signal=KILL", f"{array_id}_1")

    def task1_ended() -> bool:  # the event the count waits for: the task is no longer pending, running or ending
        out = subprocess.run(["squeue", "-h", "-t", "all", "-j", f"{array_id}_1", "-o", "%T"], capture_output=True,
                             text=True, env=harness.env, timeout=60)
        return out.returncode != 0 or out.stdout.strip() not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")

    harness.wait("task 1 to end", task1_ended, timeout=300)
    kept = task1_done()
    assert kept == 1 < len(of_1), "killed mid-way through its slice"
    harness.wait_state(run, {"CANCELLED"}, timeout=300)  # train: its dependency can no longer be met
    # The step is its tasks together: it failed with task 1, whatever task Slurm keeps under the array's id.
    harness.wait_state(run, {"FAILED", "CANCELLED"}, step="preprocess", timeout=300)
    assert not (data / "killed" / "c_text_document.idx").exists(), "no merge without task 1"

    again = harness.launch(spec, f"cluster.slurm.venv={mtk_venv}")
    assert again != run
    harness.wait_state(again, {"COMPLETED"}, timeout=900)
    logs = _task_logs(again, harness.run_record(again)["ids"]["preprocess"])
    assert f"resuming: {kept}/{len(of_1)} shards already done" in logs[1]
    for i in (0, 2, 3):  # redo nothing: found their shards done, or (scheduled after the merge) the output complete
        n = sum(1 for s in shards if own[s.index] == i)
        assert (f"resuming: {n}/{n} shards already done" in logs[i]
                or "is complete for these inputs and tokenizer; nothing to do" in logs[i]), logs[i]
    for ext in ("bin", "idx"):
        assert (data / "killed" / f"c_text_document.{ext}").read_bytes() == ref[ext]
