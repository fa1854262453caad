"""A sharded preprocess (data.corpus.shards) run as separate processes the way a Slurm array or an EKS Indexed
Job runs it: byte-identical to one process over the same documents, resumable per shard, and strict about bad
input (Parquet rows, damaged compressed files, empty corpora, impossible worker counts)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from mtk.data_jobs.preprocess import PreprocessConfig, PreprocessError, preprocess
from mtk.data_jobs.preprocess_cli import main
from mtk.launcher.entrypoint import main as entrypoint  # the program, its error boundary included

from mtk.spec.data import TokenizerSpec

GPT2 = TokenizerSpec(type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")


@pytest.fixture(scope="module")
def docs(edge_docs) -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(encoding="utf-8", errors="replace")[:6000] for p in sorted(stdlib.glob("[f-m]*.py"))[:60]]
    small = [d for d in edge_docs if len(d) < 5000]
    return [t for pair in zip(texts, small * 4, strict=False) for t in pair] + texts[len(small) * 4:]


def _job(tmp: Path, bpe_dir: Path, corpus: str, shards: int, **corpus_fields) -> Path:
    from mtk.spec import load_job

    data = tmp / "data"
    data.mkdir(exist_ok=True)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(bpe_dir / f, data / f)
    spec = {"name": "sharded", "model": {"preset": "tiny"},
            "data": {"dir": str(data), "tokenizer": GPT2.model_dump(),
                     "corpus": {"input": corpus, "output_prefix": "tok/c", "workers": 1, "shards": shards,
                                **corpus_fields}}}
    (tmp / "job.yaml").write_text(json.dumps(spec))
    (tmp / "job.json").write_text(load_job(tmp / "job.yaml").to_json())
    return tmp / "job.json"


def _task(job: Path, index: int | None, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, **(env or {})}
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)  # what an Indexed Job's pod gets
    return subprocess.Popen([sys.executable, "-m", "mtk.launcher.entrypoint", "preprocess", "--job", str(job),
                             "--shard-mb", "0.02", "--no-progress", *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _reference(tmp: Path, bpe_dir: Path, docs: list[str], formats) -> dict:
    ref = formats.write_reference(tmp / "all.jsonl", docs)
    cfg = PreprocessConfig(input=str(ref), output_prefix=str(tmp / "ref" / "c"), tokenizer=GPT2,
                           data_dir=str(bpe_dir), workers=1, progress=False)
    return preprocess(cfg, log=lambda _m: None)


@pytest.mark.workers  # several preprocess processes at once
def test_four_concurrent_tasks_over_jsonl_zst_parquet_merge_byte_identical(tmp_path, bpe_dir, docs, corpus_formats):
    ref = _reference(tmp_path, bpe_dir, docs, corpus_formats)
    job = _job(tmp_path, bpe_dir, "corpus", shards=4)
    corpus_formats.write_multiformat(tmp_path / "data" / "corpus", docs)
    procs = [_task(job, i) for i in range(4)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outs
    for i, out in enumerate(outs):
        assert f"task {i} of 4:" in out
    assert sum("preprocess: done:" in out for out in outs) == 1, "exactly one task merges"
    prefix = tmp_path / "data" / "tok" / "c_text_document"
    for ext in ("bin", "idx"):
        assert Path(f"{prefix}.{ext}").read_bytes() == Path(ref["outputs"]["text"][ext]).read_bytes()
    assert not (tmp_path / "data" / "tok" / "c.mtk-parts").exists()
    record = json.loads((tmp_path / "data" / "tok" / "c.mtk-preprocess.json").read_text())["summary"]
    assert record["docs"] == len(docs) and record["tasks"] == 4
    again = _task(job, 2)
    assert "nothing to do" in again.communicate(timeout=120)[0] and again.returncode == 0


@pytest.mark.workers  # several preprocess processes at once
def test_killed_task_redoes_only_its_unfinished_shards_and_merge_waits_for_it(tmp_path, bpe_dir, docs,
                                                                            corpus_formats):
    import signal
    import time

    from support.faults import ShardHold

    docs = docs * 8
    ref = _reference(tmp_path, bpe_dir, docs, corpus_formats)
    job = _job(tmp_path, bpe_dir, "corpus", shards=3)
    corpus_formats.write_multiformat(tmp_path / "data" / "corpus", docs)
    parts = tmp_path / "data" / "tok" / "c.mtk-parts"
    for i in (0, 2):
        out = _task(job, i).communicate(timeout=300)[0]
        assert "other tasks still running" in out
    others = {p.name: p.stat().st_mtime_ns for p in parts.glob("shard-*.done")}
    hold = ShardHold(tmp_path / "hold", count=2)  # task 1 waits after its second shard until killed there
    victim = _task(job, 1, env=hold.env())
    deadline = time.monotonic() + 120  # only a hung task takes this long
    while not hold.held() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)
    survived = len(list(parts.glob("shard-*.done"))) - len(others)
    assert survived == 2, "task 1 was killed after finishing two shards"

    merge = _task(job, None, "--merge")
    text = merge.communicate(timeout=120)[0]
    assert merge.returncode == 1 and "are not done (tasks 1)" in text
    assert not list((tmp_path / "data" / "tok").glob("c_text_document.*")), "nothing under the final prefix"

    out = _task(job, 1).communicate(timeout=300)[0]
    total = int(out.split("task 1 of 3: ")[1].split(" of ")[0])
    assert total > survived, "the kill came before task 1's last shard"
    assert f"resuming: {survived}/{total} shards already done" in out
    assert "preprocess: done:" in out and not parts.exists()
    for ext in ("bin", "idx"):
        assert Path(tmp_path / "data" / "tok" / f"c_text_document.{ext}").read_bytes() == \
            Path(ref["outputs"]["text"][ext]).read_bytes()


def test_a_late_task_inside_the_parts_dir_is_never_deleted_under_and_leaves_nothing_behind(
        tmp_path, bpe_dir, docs, corpus_formats, monkeypatch):
    """A Slurm array relaunch: task 0 (its shards already done) starts late and is still inside the parts dir
    when task 1 finishes the last shard and merges. The merge must not delete the parts under it (CI saw a
    relaunch's late task fail that way and cancel the training after it), and the late task must neither redo
    its shards into a recreated parts dir nor leave one behind."""
    import threading

    from mtk.data_jobs import preprocess as pp

    ref = _reference(tmp_path, bpe_dir, docs, corpus_formats)
    corpus_formats.write_multiformat(tmp_path / "data" / "corpus", docs)
    prefix = tmp_path / "data" / "tok" / "c"
    parts = Path(f"{prefix}.mtk-parts")

    def cfg(index: int) -> PreprocessConfig:
        return PreprocessConfig(input=str(tmp_path / "data" / "corpus"), output_prefix=str(prefix), tokenizer=GPT2,
                                data_dir=str(bpe_dir), workers=1, progress=False, shard_mb=0.02,
                                tasks=2, task_index=index)

    first = preprocess(cfg(0), log=lambda _m: None)
    assert first["merged"] is False and first["shards"], "task 0 did its shards; task 1's are missing"

    inside, go = threading.Event(), threading.Event()
    real_manifest = pp._ensure_manifest

    def late_manifest(*args):  # the late task holds here, in its task lock, until the merge goes as far as it can
        if threading.current_thread().name == "late":
            inside.set()
            assert go.wait(timeout=120)
        return real_manifest(*args)

    monkeypatch.setattr(pp, "_ensure_manifest", late_manifest)
    late_log: list[str] = []
    late_result: dict = {}

    def late() -> None:
        late_result.update(preprocess(cfg(0), log=late_log.append))

    thread = threading.Thread(target=late, name="late")
    thread.start()
    assert inside.wait(timeout=120)

    merger_log: list[str] = []
    merger_done = threading.Event()

    def merge() -> None:
        try:
            merger_log.append(repr(preprocess(cfg(1), log=merger_log.append)["merged"]))
        finally:
            merger_done.set()

    merger = threading.Thread(target=merge, name="merger")
    merger.start()

    def merge_went_as_far_as_it_can() -> bool:  # done (nothing waited for the late task) or waiting for its lock
        return merger_done.is_set() or any("task 0's lock is held" in m for m in merger_log)

    for _ in range(6000):  # 5 min of 0.05 s polls: a merger stuck elsewhere fails here, not at pytest's timeout
        if merge_went_as_far_as_it_can():
            break
        merger_done.wait(0.05)
    assert merge_went_as_far_as_it_can(), merger_log
    go.set()
    thread.join(timeout=300)
    merger.join(timeout=300)
    assert merger_log[-1] == "True", merger_log
    said = " ".join(late_log)
    assert late_result.get("merged") is False, late_log
    assert "another task has merged" in said or "another task is merging" in said, late_log
    mine = len(first["shards"])
    assert f"resuming: {mine}/{mine} shards already done" in said, "the late task redid none of its shards"
    assert not parts.exists(), f"parts left behind: {sorted(p.name for p in parts.iterdir())}"
    assert not list(prefix.parent.glob("c.mtk-lock.task-*")), "task locks removed with the parts"
    for ext in ("bin", "idx"):
        assert Path(f"{prefix}_text_document.{ext}").read_bytes() == Path(ref["outputs"]["text"][ext]).read_bytes()

    # A task that checked for the record just before the merge wrote it, and takes its lock just after.
    checks = iter([None])
    real_record = pp._done_record
    monkeypatch.setattr(pp, "_done_record", lambda *a: next(checks, real_record(*a)))
    after: list[str] = []
    assert preprocess(cfg(0), log=after.append).get("already_done") is True
    assert "another task has merged" in after[-1] and not any("task 0 of 2" in m for m in after), after
    assert not parts.exists() and not list(prefix.parent.glob("c.mtk-lock.task-*")), "nothing left behind"


def test_the_run_is_marked_data_ready_only_after_the_merge_and_its_index_cache(tmp_path, bpe_dir, docs,
                                                                            corpus_formats, monkeypatch, capsys):
    """EKS training pods start when the run's data-ready marker appears. The .bin/.idx appear before the merging
    pod has built the index cache, so a task that finds the dataset done meanwhile (a late or retried pod) must
    wait for the merge to settle, not mark it ready while the cache is half-written."""
    import threading

    from mtk.data_jobs import index_cache, preprocess_cli

    job = _job(tmp_path, bpe_dir, "corpus", shards=2)
    corpus_formats.write_multiformat(tmp_path / "data" / "corpus", docs)
    run_dir = tmp_path / "run"
    ready = run_dir / "state" / "data-ready.json"
    building, finish = threading.Event(), threading.Event()

    def slow_cache(job_json: str, log=print) -> None:  # the merging pod, building a large corpus's index cache
        building.set()
        assert finish.wait(timeout=120)
        assert not ready.exists(), "marked ready while the cache was being built"

    monkeypatch.setattr(index_cache, "build_index_cache", slow_cache)

    def argv(i: int) -> list[str]:
        return ["--job", str(job), "--run-dir", str(run_dir), "--task-index", str(i), "--shard-mb", "0.02",
                "--no-progress"]

    assert preprocess_cli.main(argv(0)) == 0 and not ready.exists(), "task 0 alone: shards done, nothing merged"
    codes: dict[str, int] = {}
    merger = threading.Thread(target=lambda: codes.update(merger=preprocess_cli.main(argv(1))))
    merger.start()
    assert building.wait(timeout=120)
    late = threading.Thread(target=lambda: codes.update(late=preprocess_cli.main(argv(0))))
    late.start()
    said = ""
    for _ in range(6000):  # 5 min of 0.05 s polls at most
        said += capsys.readouterr().out
        if "the merge is still running" in said or not late.is_alive():
            break
        late.join(timeout=0.05)
    assert "nothing to do" in said and "the merge is still running" in said, said
    assert not ready.exists()
    finish.set()
    merger.join(timeout=120)
    late.join(timeout=120)
    assert codes == {"merger": 0, "late": 0}
    marker = json.loads(ready.read_text())
    assert marker["output_prefix"] == str(tmp_path / "data" / "tok" / "c")


def test_two_runs_on_one_output_prefix_are_both_told_when_either_merges(tmp_path, bpe_dir, docs, corpus_formats,
                                                                       monkeypatch):
    """Two runs launched together on one corpus (a sweep) share its parts: whichever run's task merges, the other
    run's tasks had already ended ("the last task to finish merges"), and its training waits for its own marker."""
    from mtk.data_jobs import index_cache, preprocess_cli

    job = _job(tmp_path, bpe_dir, "corpus", shards=2)
    corpus_formats.write_multiformat(tmp_path / "data" / "corpus", docs)
    monkeypatch.setattr(index_cache, "build_index_cache", lambda job_json, log=print: None)
    runs = {name: tmp_path / "runs" / name for name in ("a", "b")}
    for run_dir in runs.values():
        run_dir.mkdir(parents=True)

    def task(run: str, i: int) -> int:
        return preprocess_cli.main(["--job", str(job), "--run-dir", str(runs[run]), "--task-index", str(i),
                                    "--shard-mb", "0.02", "--no-progress"])

    assert task("b", 0) == 0 and task("a", 0) == 0, "b's task 0 did the shards, a's found them done"
    assert not any((r / "state" / "data-ready.json").exists() for r in runs.values())
    assert task("a", 1) == 0  # the last shards: run a merges
    for name, run_dir in runs.items():
        marker = json.loads((run_dir / "state" / "data-ready.json").read_text())
        assert marker["output_prefix"] == str(tmp_path / "data" / "tok" / "c"), name
    assert task("b", 1) == 0, "b's own last task finds the data done (and its marker there)"


def test_bad_parquet_row_names_file_row_and_shard_and_skip_counts(tmp_path, bpe_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"row {i} text" for i in range(50)]
    texts[37] = None
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": texts}), path, row_group_size=10)
    cfg = PreprocessConfig(input=str(path), output_prefix=str(tmp_path / "out" / "c"), tokenizer=GPT2,
                           data_dir=str(bpe_dir), workers=1, progress=False, shard_mb=1e-6)
    with pytest.raises(PreprocessError, match=rf"{path}: row 38: column 'text' is null \(shard 3\)"):
        preprocess(cfg, log=lambda _m: None)
    assert not list((tmp_path / "out").glob("c_text_document.*"))
    cfg.skip_bad_lines = True
    summary = preprocess(cfg, log=lambda _m: None)
    assert summary["skipped_lines"] == 1 and summary["docs"] == 49
    assert summary["skipped_by_reason"] == {"column 'text' is null": 1}


def test_parquet_without_the_key_column_is_named(tmp_path, bpe_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": ["a", "b"]}), tmp_path / "c.parquet")
    with pytest.raises(PreprocessError, match="no column 'text' \\(columns: content\\)"):
        preprocess(PreprocessConfig(input=str(tmp_path / "c.parquet"), output_prefix=str(tmp_path / "o"),
                                    tokenizer=GPT2, data_dir=str(bpe_dir), workers=1, progress=False),
                   log=lambda _m: None)


@pytest.mark.parametrize("kind", ["truncated.jsonl.zst", "truncated.jsonl.gz", "plain-text.jsonl.gz",
                                  "truncated.jsonl.xz"])
def test_damaged_or_mislabelled_compressed_file_is_a_named_error(tmp_path, bpe_dir, kind, capsys):
    import gzip
    import lzma

    import zstandard

    body = "".join(json.dumps({"text": f"document {i} " * 30}) + "\n" for i in range(400)).encode()
    packed = {".zst": zstandard.ZstdCompressor().compress, ".gz": gzip.compress, ".xz": lzma.compress}
    suffix = Path(kind).suffix
    path = tmp_path / kind
    path.write_bytes(body if kind.startswith("plain") else packed[suffix](body)[: -10])  # cut in the last block
    code = entrypoint(["preprocess", "--input", str(path), "--output-prefix", str(tmp_path / "o"),
                       "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(bpe_dir / "vocab.json"),
                       "--merge-file", str(bpe_dir / "merges.txt"), "--workers", "1", "--no-progress"])
    assert code == 1
    err = capsys.readouterr().err
    assert f"{path}: this {suffix} file" in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("o_text_document.*"))


def test_damaged_compressed_message(tmp_path, bpe_dir, capsys):
    import zstandard

    body = "".join(json.dumps({"text": f"document {i} " * 30}) + "\n" for i in range(400)).encode()
    path = tmp_path / "c.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(body)[:300])
    assert entrypoint(["preprocess", "--input", str(path), "--output-prefix", str(tmp_path / "o"),
                       "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(bpe_dir / "vocab.json"),
                       "--merge-file", str(bpe_dir / "merges.txt"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"{path}: this .zst file" in err and "re-download it" in err and "Traceback" not in err


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_nonpositive_workers_refused(tmp_path, bpe_dir, workers, capsys):
    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(SystemExit) as stop:  # argparse: the usage error, exit 2
        main(["--input", str(tmp_path / "c.jsonl"), "--output-prefix", str(tmp_path / "o"),
              "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(bpe_dir / "vocab.json"),
              "--merge-file", str(bpe_dir / "merges.txt"), "--workers", workers])
    assert stop.value.code == 2
    assert f"argument --workers: {workers} is out of range: must be ≥ 1" in capsys.readouterr().err
    assert not list(tmp_path.glob("o*"))


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_corpus_is_an_error_unless_allowed(tmp_path, bpe_dir, content):
    (tmp_path / "c.jsonl").write_bytes(content)
    cfg = PreprocessConfig(input=str(tmp_path / "c.jsonl"), output_prefix=str(tmp_path / "out" / "c"),
                           tokenizer=GPT2, data_dir=str(bpe_dir), workers=1, progress=False)
    with pytest.raises(PreprocessError, match="allow_empty"):
        preprocess(cfg, log=lambda _m: None)
    assert not list(tmp_path.glob("out/c_text_document.*"))
    cfg.allow_empty = True
    summary = preprocess(cfg, log=lambda _m: None)
    assert summary["docs"] == 0 and Path(summary["outputs"]["text"]["idx"]).stat().st_size == 34 + 8


@pytest.mark.workers  # several preprocess processes at once
def test_rendered_indexed_job_command_with_job_completion_index_builds_the_dataset(tmp_path, bpe_dir, docs,
                                                                                   corpus_formats):
    """The EKS Indexed Job, exercised for real: its pod command, run as local processes with the environment
    the Job controller gives each pod (JOB_COMPLETION_INDEX), at most ``parallelism`` at a time."""
    from mtk.k8s import manifests, names

    from mtk.spec.loader import validate

    docs = docs * 2
    ref = _reference(tmp_path, bpe_dir, docs, corpus_formats)
    data = tmp_path / "data"
    corpus_formats.write_multiformat(data / "corpus", docs)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(bpe_dir / f, data / f)
    job = validate({
        "name": "tiny-eks", "model": {"preset": "tiny"}, "parallel": {"tp": 2},
        "image": {"registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com", "name": "mtk", "tag": "t1"},
        "cluster": {"nodes": 2, "procs_per_node": 1, "device": "cpu", "runs_dir": str(tmp_path / "runs"),
                    "eks": {"fsx_mount": str(tmp_path)}},
        "data": {"dir": str(data), "tokenizer": GPT2.model_dump(),
                 "corpus": {"input": "corpus", "output_prefix": "tok/c", "workers": 1, "shards": 4,
                            "max_parallel": 2, "shard_mb": 0.05}},
        "train": {"micro_batch_size": 2, "global_batch_size": 4, "iterations": 4},
    }, backend="eks", check_files=False)
    (tmp_path / "job.json").write_text(job.to_json())
    run_dir = str(tmp_path / "runs" / "r1")
    objs = {o.step: o.body for o in manifests.build(job, run_dir)}
    pre = objs["preprocess"]
    spec = pre["spec"]
    [container] = spec["template"]["spec"]["containers"]
    command = [str(tmp_path / "job.json") if a == names.SPEC_PATH else a for a in container["command"]]
    assert command[0] == "mtk-entrypoint"
    argv = [sys.executable, "-m", "mtk.launcher.entrypoint", *command[1:], "--no-progress"]
    outs: list[str] = []
    pending = list(range(spec["completions"]))
    while pending:  # the controller's parallelism: at most this many pods at once
        batch, pending = pending[: spec["parallelism"]], pending[spec["parallelism"]:]
        procs = [subprocess.Popen(argv, env={**os.environ, "JOB_COMPLETION_INDEX": str(i)}, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for i in batch]
        outs += [p.communicate(timeout=300)[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
    assert [f"task {i} of 4:" in out for i, out in enumerate(outs)] == [True] * 4
    assert not any(": 0 of " in out for out in outs), "every task had work"
    merged = [i for i, out in enumerate(outs) if "preprocess: done:" in out]
    assert len(merged) == 1 and merged[0] >= spec["completions"] - spec["parallelism"], "a pod of the last wave merged"
    for prefix in job.data.corpus_prefixes():
        for ext in ("bin", "idx"):
            assert Path(f"{prefix}.{ext}").read_bytes() == Path(ref["outputs"]["text"][ext]).read_bytes()
    # What the training pods' init container waits for is what these pods wrote, after the merge and its cache.
    init = objs["train"]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"][0]
    [ready] = init["command"][4:]
    assert ready == str(Path(run_dir) / "state" / "data-ready.json")
    marker = json.loads(Path(ready).read_text())
    assert marker["outputs"]["text"] == [f"{job.data.corpus_prefixes()[0]}.{e}" for e in ("bin", "idx")]
    assert "index cache:" in outs[merged[0]], "the merging pod built the index cache before the marker"
    waited = subprocess.run(init["command"], capture_output=True, text=True, timeout=60)
    assert waited.returncode == 0 and "waiting" not in waited.stdout, "the init container passes at once"


@pytest.mark.workers  # several preprocess processes at once
def test_s3_prefix_of_jsonl_zst_parquet_streams_to_the_same_bytes(tmp_path, bpe_dir, docs, corpus_formats,
                                                                  local_s3):
    """s3:// input through boto3 against moto's S3 server on 127.0.0.1 (ranged reads, byte-range shards)."""
    s3 = local_s3
    ref = _reference(tmp_path, bpe_dir, docs, corpus_formats)
    files = corpus_formats.write_multiformat(tmp_path / "local", docs)
    s3.create_bucket(Bucket="corpus")
    for f in files:
        s3.upload_file(str(f), "corpus", f"web/{f.name}")
    s3.put_object(Bucket="corpus", Key="web/README.md", Body=b"not a corpus file")
    s3.put_object(Bucket="corpus", Key="webby/x.jsonl", Body=b'{"text": "another prefix"}\n')
    cfg = PreprocessConfig(input="s3://corpus/web", output_prefix=str(tmp_path / "s3" / "c"), tokenizer=GPT2,
                           data_dir=str(bpe_dir), workers=2, progress=False, shard_mb=0.01)
    got = preprocess(cfg, log=lambda _m: None)
    assert got["docs"] == len(docs)
    for ext in ("bin", "idx"):
        assert Path(got["outputs"]["text"][ext]).read_bytes() == Path(ref["outputs"]["text"][ext]).read_bytes()
    with pytest.raises(PreprocessError, match=r"s3://corpus/nothing: no \.jsonl"):
        preprocess(PreprocessConfig(input="s3://corpus/nothing", output_prefix=str(tmp_path / "n"),
                                    tokenizer=GPT2, data_dir=str(bpe_dir), workers=1, progress=False),
                   log=lambda _m: None)


def test_entrypoint_takes_a_parquet_file_with_megatron_flags(tmp_path, bpe_dir, docs, corpus_formats):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ref = _reference(tmp_path, bpe_dir, docs, corpus_formats)
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"text": docs, "url": [f"u{i}" for i in range(len(docs))]}), path, row_group_size=7)
    out = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "preprocess", "--input", str(path),
                          "--output-prefix", str(tmp_path / "pq"), "--tokenizer-type", "GPT2BPETokenizer",
                          "--vocab-file", str(bpe_dir / "vocab.json"), "--merge-file", str(bpe_dir / "merges.txt"),
                          "--append-eod", "--workers", "2", "--no-progress"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for ext in ("bin", "idx"):
        assert (tmp_path / f"pq_text_document.{ext}").read_bytes() == Path(ref["outputs"]["text"][ext]).read_bytes()


def test_merge_builds_the_training_index_cache_once_in_the_data_dir(tmp_path, bpe_dir, docs, corpus_formats,
                                                                    capsys):
    """After the merge the run's GPTDataset indices exist in <data.dir>/index-cache; the training ranks' build
    then only loads them (no file is added or rewritten)."""
    from mtk.training import data as train_data

    from mtk.spec import load_job_json

    job_path = _job(tmp_path, bpe_dir, "corpus", shards=2)
    job = json.loads(job_path.read_text())
    job["train"].update(iterations=3, global_batch_size=4, micro_batch_size=1, eval_interval=None)
    job_path.write_text(json.dumps(job))
    corpus_formats.write_multiformat(tmp_path / "data" / "corpus", docs)
    assert main(["--job", str(job_path), "--no-progress", "--task-index", "0"]) == 0
    cache = tmp_path / "data" / "index-cache"
    assert not cache.exists(), "no index before the merge"
    assert main(["--job", str(job_path), "--no-progress", "--task-index", "1"]) == 0
    out = capsys.readouterr().out
    assert "index cache: 12 train" in out and str(cache) in out
    built = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    assert any(p.name.endswith("document_index.npy") for p in built)
    loaded = load_job_json(job_path)
    assert train_data.cache_dir(loaded, run_dir=str(tmp_path / "run")) == str(cache)
    train_data.build_datasets(loaded, train_data.tokenizer_info(loaded), run_dir=str(tmp_path / "run"))
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == built


def test_mock_data_index_goes_to_the_run_dir_not_the_working_directory(tmp_path):
    from mtk.training import data as train_data

    from mtk.spec.loader import validate

    job = validate({"name": "m", "model": {"preset": "tiny"}, "data": {"dir": "data"}})
    assert train_data.cache_dir(job, run_dir=str(tmp_path / "run")) == str(tmp_path / "run" / "index-cache")
    assert train_data.cache_dir(job) == "data/index-cache"


def test_shared_json_files_survive_writers_with_one_pid(tmp_path):
    """Every pod of an Indexed Job runs as PID 1, so a temp name made from the PID is the same in all of them:
    writers sharing one PID (threads here) must each write whole files, and none may recreate a removed dir."""
    import threading

    from mtk.data_jobs.preprocess_worker import atomic_json

    path = tmp_path / "manifest.json"
    errors: list[BaseException] = []
    reads: list[dict] = []

    def write(n: int) -> None:
        try:
            for i in range(200):
                atomic_json(str(path), {"writer": n, "i": i, "pad": "x" * 4096})
        except BaseException as exc:  # every failure is the finding
            errors.append(exc)

    def read() -> None:
        while any(t.is_alive() for t in writers):
            if path.exists():
                reads.append(json.loads(path.read_text()))

    writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in writers:
        t.start()
    reader = threading.Thread(target=read)
    reader.start()
    for t in [*writers, reader]:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert all(len(r["pad"]) == 4096 for r in reads)
    assert json.loads(path.read_text())["i"] == 199
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"], "no temp file left behind"
    with pytest.raises(FileNotFoundError):
        atomic_json(str(tmp_path / "gone" / "task-00000.json"), {})
    assert not (tmp_path / "gone").exists()
