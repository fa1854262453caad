"""Metrics (FLOPs formula, JSONL records, line format), run control and the last-exit record."""

from __future__ import annotations

import json
import os
import signal

import pytest
from mtk.training import control, metrics

from mtk import exitcodes, run_layout
from mtk.spec import Job


def _job(**model) -> Job:
    return Job.model_validate({"name": "t", "model": {"preset": "tiny", **model},
                               "train": {"global_batch_size": 8, "iterations": 5}})


def test_flops_formula_by_hand_for_the_tiny_gpt():
    job = _job()
    b, s, L, h, ffn, v = 8, 64, 2, 64, 256, 1024
    # per layer and token: QKV+proj 4h² (MHA), causal scores+context sh (half of 2sh), MLP 2·h·ffn; logits h·v.
    fwd = b * s * (L * (4 * h * h + s * h + 2 * h * ffn) + h * v) * 2
    assert metrics.flops_per_iteration(job, v) == pytest.approx(3 * fwd)


def test_flops_counts_active_experts_and_gqa():
    dense = metrics.flops_per_iteration(_job(), 1024)
    moe = metrics.flops_per_iteration(_job(moe={"num_experts": 8, "router_topk": 2}), 1024)
    mlp = 3 * 2 * 8 * 64 * 2 * (2 * 64 * 256)  # one dense MLP's fwd+bwd FLOPs
    assert moe - dense == pytest.approx(mlp)  # top-2 = one extra expert, not 7
    gqa = metrics.flops_per_iteration(_job(num_query_groups=1), 1024)
    assert gqa < dense


def test_restart_count_prefers_slurm_then_elastic():
    assert metrics.restart_count({"SLURM_RESTART_COUNT": "2"}) == 2
    assert metrics.restart_count({"TORCHELASTIC_RESTART_COUNT": "3"}) == 3
    assert metrics.restart_count({"SLURM_RESTART_COUNT": "", "TORCHELASTIC_RESTART_COUNT": "0"}) == 0


def test_writer_averages_between_logs_and_writes_jsonl(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    w = metrics.MetricsWriter(_job(), tmp_path, rank=0, world_size=2, padded_vocab=1024, tensorboard=False)
    w.step(2.0, 0.1, skipped=False)
    w.step(float("nan"), 0.3, skipped=True)
    rec = w.log(2, 16, 1e-3, 0.5, 1.0)
    w.log_eval(2, 1.5)
    w.close()
    assert rec["lm_loss"] == 2.0 and rec["nan"] == 1 and rec["skipped"] == 1
    assert rec["step_time_ms"] == pytest.approx(200.0)
    assert rec["tokens_per_s"] == pytest.approx(8 * 64 / 0.2)
    assert rec["restart_count"] == 1
    lines = [json.loads(x) for x in (tmp_path / run_layout.METRICS_FILE).read_text().splitlines()]
    assert [r["kind"] for r in lines] == ["train", "eval"]
    assert lines[1]["ppl"] == pytest.approx(4.4816890703)
    out = capsys.readouterr().out
    assert "iteration        2/       5 | consumed samples:           16" in out
    assert "number of nan iterations:   1" in out and "validation loss at iteration 2" in out


def test_non_zero_ranks_write_nothing(tmp_path):
    w = metrics.MetricsWriter(_job(), tmp_path, rank=1, world_size=2, padded_vocab=1024, tensorboard=False)
    w.step(1.0, 0.1, False)
    assert w.log(1, 8, 1e-3, None, 1.0)["grad_norm"] is None
    w.close()
    assert not (tmp_path / run_layout.METRICS_FILE).exists()


def test_signal_sets_flag_and_flags_reduce_to_a_decision(tmp_path):
    c = control.Control(tmp_path, rank=0)
    c.install()
    try:
        assert c.local_flags(check_triggers=True) == [0.0, 0.0, 0.0]
        os.kill(os.getpid(), signal.SIGUSR2)
        assert c.signalled == "SIGUSR2"
        (tmp_path / "triggers").mkdir()
        (tmp_path / run_layout.SAVE_TRIGGER).touch()
        assert c.local_flags(check_triggers=True) == [1.0, 1.0, 0.0]
        assert c.local_flags(check_triggers=False) == [1.0, 0.0, 0.0]
    finally:
        c.uninstall()
    d = c.decision([0.0, 2.0, 1.0])
    assert d == control.Decision(signal=False, save=True, exit=True)
    c.consume_save_trigger()
    assert not (tmp_path / run_layout.SAVE_TRIGGER).exists()


def test_peer_signal_is_named(tmp_path):
    c = control.Control(tmp_path, rank=1)
    assert c.local_flags(check_triggers=True) == [0.0, 0.0, 0.0]  # only rank 0 reads triggers
    assert c.decision([1.0, 0.0, 0.0]).signal and c.signalled.startswith("SIGNAL(peer")


def test_last_exit_record(tmp_path):
    path = control.write_last_exit(tmp_path, exitcodes.REQUEUE, 17, "signal SIGTERM", 17)
    rec = json.loads(path.read_text())
    assert path == tmp_path / "state" / "last_exit.json"
    assert rec["code"] == 42 and rec["iteration"] == 17 and rec["checkpoint_iteration"] == 17
    assert rec["reason"] == "signal SIGTERM"
