"""A name means one run (issue 44, item 2): with runs of the jobs ``tiny`` and ``tiny-corpus`` both on disk, every
verb that takes RUN acts on the run it was given, never on another whose name it starts (``tiny`` is not
``tiny-corpus-<stamp>``); a unique prefix still works and says which run it took; an ambiguous one is refused
naming the candidates.

The runs are real: two followed ``mtk launch`` of examples/tiny.yaml (2 CPU ranks, gloo, megatron-core), the
second named ``tiny-corpus`` and trained one iteration longer so each verb's output tells them apart; the last test
launches a third, live run of ``tiny`` (its newest) for ``save`` and ``cancel``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")


def mtk(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "mtk", *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    if check and out.returncode != 0:
        raise AssertionError(f"mtk {' '.join(args)} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr}")
    return out


def launch(cwd: Path, name: str, iterations: int, *extra: str, follow: bool = True) -> Path:
    sets = [f"name={name}", f"train.iterations={iterations}", f"train.checkpoint.save_interval={iterations}",
            "train.lr_warmup_iters=1", *extra]
    out = mtk("launch", TINY, "--backend", "local", *[a for s in sets for a in ("--set", s)],
              *([] if follow else ["--no-follow"]), cwd=cwd)
    return Path([ln for ln in out.stdout.splitlines() if ln.startswith("run: ")][-1].removeprefix("run: "))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    cwd = tmp_path_factory.mktemp("run-names")
    found = {"cwd": cwd, "tiny": launch(cwd, "tiny", 2), "tiny-corpus": launch(cwd, "tiny-corpus", 3)}
    assert found["tiny"].name.startswith("tiny-2") and found["tiny-corpus"].name.startswith("tiny-corpus-2")
    return found


def test_status_takes_the_exact_job_name_not_a_longer_one(runs):
    for name in ("tiny", "tiny-corpus"):
        out = mtk("status", name, cwd=runs["cwd"])
        assert out.stdout.splitlines()[0] == f"run {name} (local) {runs[name]}", out.stdout
        assert out.stderr == ""  # named exactly: nothing to explain
        by_dir_name = mtk("status", "--json", runs[name].name, cwd=runs["cwd"])
        assert json.loads(by_dir_name.stdout)[0]["state"] == "COMPLETED"


def test_logs_print_the_named_runs_log(runs):
    for name in ("tiny", "tiny-corpus"):
        out = mtk("logs", name, cwd=runs["cwd"])
        assert out.stdout == (runs[name] / "logs" / "train.log").read_text()
    assert "iteration        3/       3" in mtk("logs", "tiny-corpus", cwd=runs["cwd"]).stdout
    assert "/       3" not in mtk("logs", "tiny", cwd=runs["cwd"]).stdout


def test_report_reports_the_named_run(runs):
    out = mtk("report", "tiny", "--no-plots", "--no-wandb", cwd=runs["cwd"])
    assert out.stdout.splitlines()[0] == f"report for {runs['tiny']}"
    summary = json.loads(mtk("report", "tiny-corpus", "--no-plots", "--no-wandb", "--json", cwd=runs["cwd"]).stdout)
    assert summary["final_iteration"] == 3 and summary["ended"] == "COMPLETED at iteration 3", summary


@pytest.mark.parametrize("verb", ["stop", "save"])
def test_stop_and_save_answer_for_the_named_run(runs, verb):
    out = mtk(verb, "tiny", cwd=runs["cwd"], check=False)
    assert out.returncode == 1 and f"run tiny ({runs['tiny']}) has ended (train COMPLETED)" in out.stderr, out.stderr
    assert not (runs["tiny-corpus"] / "triggers").exists() or not any((runs["tiny-corpus"] / "triggers").iterdir())


def test_convert_exports_the_named_runs_checkpoint(runs):
    dest = runs["cwd"] / "hf-tiny"
    out = mtk("convert", "tiny", str(dest), "--quiet", cwd=runs["cwd"])
    ckpt = runs["cwd"] / "runs" / "tiny" / "checkpoints"
    assert f"source: {ckpt} (the checkpoints of run tiny, {runs['tiny']})" in out.stderr, out.stderr
    assert (dest / "config.json").is_file()


def test_a_unique_prefix_works_and_says_which_run(runs):
    out = mtk("status", "tiny-c", cwd=runs["cwd"])
    assert out.stdout.splitlines()[0] == f"run tiny-corpus (local) {runs['tiny-corpus']}"
    assert f"run: {runs['tiny-corpus'].name} ({runs['tiny-corpus']}) (the one run under runs/ whose name starts " \
           "with tiny-c)" in out.stderr


@pytest.mark.parametrize("verb", ["status", "logs", "report", "stop", "save", "cancel", "convert"])
def test_an_ambiguous_prefix_is_refused_naming_the_candidates(runs, verb):
    args = [verb, "tiny-"] + ([str(runs["cwd"] / "never")] if verb == "convert" else [])
    out = mtk(*args, cwd=runs["cwd"], check=False)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.startswith("error: RUN 'tiny-' is the start of 2 run names under runs/: ")
    assert runs["tiny"].name in out.stderr and runs["tiny-corpus"].name in out.stderr
    assert len(out.stderr.splitlines()) == 1 and out.stdout == ""


def test_a_job_name_means_its_newest_run_for_save_and_cancel(runs):
    """Last: a live third run of ``tiny`` (its own checkpoint dir) becomes what ``tiny`` names."""
    cwd = runs["cwd"]
    live = launch(cwd, "tiny", 1000000, f"train.checkpoint.dir={cwd / 'live-ckpt'}", follow=False)
    runner = int(json.loads((live / "run.json").read_text())["ids"]["runner"])
    corpus_before = {p.name: p.stat().st_mtime_ns for p in runs["tiny-corpus"].iterdir()}
    try:
        saved = mtk("save", "tiny", cwd=cwd)
        assert saved.stdout == f"save requested: {live}/triggers/save\n"
        assert f"run: {live.name} ({live}) (the newest of 2 runs of job tiny)" in saved.stderr
        cancelled = mtk("cancel", "tiny", cwd=cwd)
        assert cancelled.stdout == f"cancelled tiny ({live})\n"
        assert not _alive(runner), "mtk cancel returns once the named run's runner is gone"
    finally:
        if _alive(runner):
            mtk("cancel", str(live), cwd=cwd)
    assert {p.name: p.stat().st_mtime_ns for p in runs["tiny-corpus"].iterdir()} == corpus_before
    assert mtk("status", "--json", "tiny-corpus", cwd=cwd).stdout.count('"COMPLETED"') == 1


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
