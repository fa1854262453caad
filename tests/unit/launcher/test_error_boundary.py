"""Every class of bad input the issue lists ends in one named error (exit 2 for bad input, 1 for a failed
run), never a Python traceback; --debug / MTK_DEBUG=1 shows the traceback."""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TINY = str(EXAMPLES / "tiny.yaml")


def run(*argv: str, cwd=None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=180, cwd=cwd,
                          env={**os.environ, **(env or {})})


def _in_process(main, argv: list[str], cwd=None) -> subprocess.CompletedProcess:
    """The real entry point, in this process (a subprocess per case costs seconds of imports)."""
    err, out = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd:
            os.chdir(cwd)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(old)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def mtk(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    if env:
        return run("-m", "mtk", *args, cwd=cwd, env=env)
    from mtk.launcher.cli import main

    return _in_process(main, list(args), cwd)


def entry(*args: str, env=None) -> subprocess.CompletedProcess:
    if env:
        return run("-m", "mtk.launcher.entrypoint", *args, env=env)
    from mtk.launcher.entrypoint import main

    return _in_process(main, list(args))


def named(out: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    for w in words:
        assert w in out.stderr, (w, out.stderr)


def test_spec_file_not_utf8_or_a_directory(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: tiny\nmodel: {preset: tiny}\n# caf\xe9\n")
    named(mtk("validate", str(bad)), 2, f"{bad}:line 3", "UTF-8")
    named(mtk("validate", str(tmp_path)), 2, str(tmp_path), "directory")
    named(mtk("launch", str(tmp_path), "--dry-run"), 2, "directory")


def test_duplicate_yaml_keys_name_both_lines(tmp_path):
    spec = tmp_path / "dup.yaml"
    spec.write_text("name: tiny\nmodel: {preset: tiny}\ntrain:\n  iterations: 5\ntrain:\n  lr: 0.1\n")
    named(mtk("validate", str(spec)), 2, "duplicate key 'train'", "line 3", "line 5")
    nested = tmp_path / "nested.yaml"
    nested.write_text("name: tiny\nmodel:\n  preset: tiny\n  preset: gpt-7.5b\n")
    named(mtk("validate", str(nested)), 2, "duplicate key 'preset'", "line 3", "line 4")


@pytest.mark.parametrize("setting,field", [("parallel.tp=true", "parallel.tp"),
                                           ("train.iterations=false", "train.iterations"),
                                           ("train.lr=true", "train.lr"),
                                           ("cluster.nodes=0", "cluster.nodes"),
                                           ("train.global_batch_size=-8", "train.global_batch_size")])
def test_a_bool_is_not_a_number_and_counts_are_positive(setting, field):
    named(mtk("validate", TINY, "--set", setting), 2, field)


def test_damaged_run_record_for_every_run_verb(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    for content in ("{not json", '{"backend": "local"}', '["x"]', '{"backend": "nope", "run_dir": "x", "name": "y"}',
                    '{"backend": "local", "run_dir": 3, "name": "y"}'):
        (run_dir / "run.json").write_text(content)
        for verb in ("status", "logs", "report", "cancel", "save", "stop"):
            named(mtk(verb, str(run_dir)), 2, f"{run_dir}/run.json")
    (run_dir / "run.json").write_bytes(b"\xff\xfe garbage")
    named(mtk("status", str(run_dir)), 2, "run.json")


def test_out_under_an_existing_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    named(mtk("render", TINY, "--out", str(blocker / "sub")), 2, str(blocker))
    metrics_run = tmp_path / "run"
    metrics_run.mkdir()
    (metrics_run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "iteration": 1, "lm_loss": 1.0}) + "\n")
    named(mtk("report", str(metrics_run), "--out", str(blocker / "rep"), "--no-plots"), 2, str(blocker))


def test_bad_job_json_for_an_entrypoint_step_is_named_like_the_cli(tmp_path):
    job = tmp_path / "job.json"
    job.write_text("{ not json")
    for step in ("getdata", "preprocess", "train"):
        named(entry(step, "--job", str(job)), 2, str(job), "not valid JSON")
    job.write_text(json.dumps({"name": "Bad Name", "model": {"preset": "tiny"}, "train": {"iterashuns": 3}}))
    for step in ("getdata", "train"):
        out = entry(step, "--job", str(job))
        named(out, 2, "train.iterashuns", "did you mean 'iterations'", "name")
        assert "pydantic" not in out.stderr and "validation error" not in out.stderr


def test_debug_shows_the_traceback(tmp_path):
    job = tmp_path / "job.json"
    job.write_text("[]")
    quiet = entry("train", "--job", str(job))
    named(quiet, 2, "JSON object")
    loud = entry("train", "--job", str(job), env={"MTK_DEBUG": "1"})
    assert loud.returncode == 2 and "Traceback" in loud.stderr
    bad = tmp_path / "d"
    bad.mkdir()
    assert "Traceback" in run("-m", "mtk", "--debug", "validate", str(bad)).stderr


def _finished_local_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "done"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"backend": "local", "run_dir": str(run_dir), "name": "done",
                                                  "ids": {"runner": "0"}}))
    (run_dir / "state" / "steps.json").write_text(json.dumps(
        {"runner_pid": 0, "done": True, "steps": {"train": {"state": "COMPLETED", "exit_code": 0}}}))
    return run_dir


def test_save_and_stop_on_a_finished_run_do_not_claim_success(tmp_path):
    run_dir = _finished_local_run(tmp_path)
    for verb in ("save", "stop"):
        named(mtk(verb, str(run_dir)), 1, "has ended", "train COMPLETED")
    assert not (run_dir / "triggers").exists()


def test_dry_run_never_rewrites_an_existing_runs_job_json(tmp_path):
    run_dir = tmp_path / "existing"
    run_dir.mkdir()
    (run_dir / "job.json").write_text('{"the": "record of what trained"}\n')
    named(mtk("launch", TINY, "--dry-run", "--run-dir", str(run_dir)), 2, "--run-dir", "existing run")
    assert (run_dir / "job.json").read_text() == '{"the": "record of what trained"}\n'


def test_unusable_runs_dir_and_checkpoint_dir_are_refused_at_launch(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    named(mtk("launch", TINY, "--no-follow", "--set", f"cluster.runs_dir={blocker}/runs", cwd=tmp_path), 2,
          "cluster.runs_dir", "is a file")
    named(mtk("launch", TINY, "--no-follow", "--set", f"cluster.runs_dir={tmp_path}/runs", "--set",
              f"train.checkpoint.dir={blocker}/ckpt", cwd=tmp_path), 2, "train.checkpoint.dir")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/run.json"))


@pytest.mark.parametrize("setting,field", [("cluster.eks.namespace=Team_A", "cluster.eks.namespace"),
                                           ("cluster.eks.shm_size=64GB", "cluster.eks.shm_size"),
                                           ("cluster.eks.memory=lots", "cluster.eks.memory"),
                                           ("cluster.eks.node_selector.pool=gpu nodes", "cluster.eks.node_selector"),
                                           ("cluster.eks.image_pull_secrets=[Reg_Cred]",
                                            "cluster.eks.image_pull_secrets")])
def test_kubernetes_names_quantities_and_labels_checked_at_validate(setting, field):
    named(mtk("validate", TINY, "--set", setting), 2, field)


def _write_pair(prefix: Path, lengths: list[int], bin_bytes: int | None = None) -> None:
    n = len(lengths)
    pointers, pos = [], 0
    for length in lengths:
        pointers.append(pos)
        pos += 2 * length  # uint16 tokens
    head = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, n, n + 1)
    body = struct.pack(f"<{n}i", *lengths) + struct.pack(f"<{n}q", *pointers) + struct.pack(f"<{n + 1}q",
                                                                                            *range(n + 1))
    prefix.with_suffix(".idx").write_bytes(head + body)
    prefix.with_suffix(".bin").write_bytes(b"\0" * (pos if bin_bytes is None else bin_bytes))


@pytest.mark.megatron  # the valid spec goes on to megatron-core's model build (child)
def test_garbage_idx_and_truncated_bin_are_caught_by_the_file_check(tmp_path):
    sets = ["--set", f"data.dir={tmp_path}", "--set", "data.blend=[{prefix: c}]", "--check-files", "-q"]
    _write_pair(tmp_path / "c", [5, 7, 3])
    assert mtk("validate", TINY, *sets).returncode == 0
    _write_pair(tmp_path / "c", [5, 7, 3], bin_bytes=20)
    named(mtk("validate", TINY, *sets), 2, "data.blend.0.prefix", "c.bin", "truncated")
    (tmp_path / "c.idx").write_bytes(b"this is not an index at all")
    named(mtk("validate", TINY, *sets), 2, "data.blend.0.prefix", "c.idx", "not a Megatron index")


def _dcp_checkpoint(root: Path, iteration: int) -> Path:
    import torch
    import torch.distributed.checkpoint as dcp

    path = root / f"iter_{iteration:07d}"
    dcp.save({"w": torch.arange(4096, dtype=torch.float32)}, checkpoint_id=str(path), no_dist=True)
    (root / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return path


def test_damaged_checkpoint_is_named_once_before_any_rank_starts(tmp_path):
    ckpt = tmp_path / "ckpt"
    job = tmp_path / "job.json"
    from mtk.spec import load_job

    spec = load_job(TINY, [f"train.checkpoint.dir={ckpt}"])
    job.write_text(spec.to_json())
    path = _dcp_checkpoint(ckpt, 10)
    assert entry("train", "--job", str(job), "--print").returncode == 0  # an intact checkpoint passes
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    tracker.write_text("garbage\n")
    named(entry("train", "--job", str(job), "--print"), 2, str(tracker), "not an iteration number")
    tracker.write_text("20\n")
    named(entry("train", "--job", str(job), "--print"), 2, "iter_0000020", "is missing")
    tracker.write_text("10\n")
    shard = next(path.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    out = entry("train", "--job", str(job), "--print")
    named(out, 2, str(shard), "truncated")
    assert out.stderr.count("error:") == 1
