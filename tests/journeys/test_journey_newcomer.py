"""Journey J6, the newcomer (issue 37): the README's Quick start taken further in the environment it builds — a
fresh clone, `make demo`'s venv from requirements/demo.lock (shared with J5: tests/support/readme_env.py), a shell
with no Slurm controller, Kubernetes cluster or Docker daemon to reach, and no network (HTTP(S) goes to a dead
proxy, so a step that downloads anything fails).

`make demo-data` makes the offline real-data example's corpus and its own BPE; both examples that read them preview
with `--dry-run`; the 7.5B Slurm example validates without `--backend`; the corpus example preprocesses and trains
without upstream warnings; launched again to train further it resumes, says in one line what happens to the LR,
and `mtk stop` ends it as STOPPED (launch exit 43, `mtk ls`, `mtk status`); `mtk build-image` and an EKS and a
Slurm launch with nothing to reach exit 2 with one error line and record no submitted run, after which a bare
`mtk status`/`mtk logs` still answer; `mtk convert` takes the run by name, and transformers from that environment
loads the export with its tokenizer and generates; last, Ctrl-C on a followed launch (the default two DataLoader
workers) saves the iteration in flight, exits 130 with one line, and the run reads CANCELLED in ls, status and
report (issue 44)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from support.journey import step
from support.journey_local import tracked, train_records, wait_for
from support.readme_env import ReadmeEnv, run, sh
from support.terminal import as_a_terminal_starts_it

pytestmark = pytest.mark.integration

SPEC = "examples/tiny-corpus.yaml"
DATA_FILES = ("corpus.jsonl", "vocab.json", "merges.txt")
STOPPED = 43  # `mtk launch` following a run that `mtk stop` ended (README, exit codes)
PROMPT = "mtk launch trains"
# upstream noise a user learns to ignore (issue 37, case 9): Python warnings, TE/Apex absence, rank guessing
NOISE = re.compile(r"Warning|Transformer Engine and Apex|Could not determine rank")
LOAD = """import json, sys, transformers as t
tok = t.AutoTokenizer.from_pretrained(sys.argv[1])
model = t.AutoModelForCausalLM.from_pretrained(sys.argv[1])
ids = tok(sys.argv[2], return_tensors="pt").input_ids
out = model.generate(ids, max_new_tokens=8, do_sample=False)
print(json.dumps({"vocab": len(tok), "eos": tok.eos_token_id, "model_eos": model.config.eos_token_id,
                  "prompt": ids.shape[-1], "total": out.shape[-1], "text": tok.decode(out[0])}))"""


def offline_shell(readme: ReadmeEnv, tmp: Path) -> dict[str, str]:
    """The user's shell on a laptop, offline: nothing points at a Slurm controller, Kubernetes cluster or Docker
    daemon, and every HTTP(S) request outside this machine goes to a port nothing listens on."""
    env = {k: v for k, v in readme.env.items() if k not in ("SLURM_CONF", "KUBERNETES_SERVICE_HOST")}
    dead = {name: "http://127.0.0.1:9" for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
    local = {name: "localhost,127.0.0.1" for name in ("no_proxy", "NO_PROXY")}
    return {**env, **dead, **local, "KUBECONFIG": str(tmp / "no-kubeconfig"),
            "DOCKER_HOST": f"unix://{tmp}/no-docker.sock"}


def one_error_line(out: subprocess.CompletedProcess, names: str) -> None:
    """A refusal as the README promises it: exactly one `error:` line, naming ``names``, and no traceback."""
    text = out.stdout + out.stderr
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and names in errors[0], text[-3000:]
    assert "Traceback" not in text and "internal error" not in text, text[-3000:]


def noise(text: str) -> list[str]:
    return [line for line in text.splitlines() if NOISE.search(line)]


def run_dir_of(log: Path) -> Path | None:
    """The run dir a following `mtk launch` printed (``run: DIR``), once it has."""
    lines = log.read_text().splitlines() if log.exists() else []
    return next((Path(line.removeprefix("run: ")) for line in lines if line.startswith("run: ")), None)


def test_newcomer_offline_corpus_preview_train_extend_stop_unreachable_clusters_status_convert_load_ctrl_c(
        readme_env, tmp_path):
    home, env, mtk = tmp_path / "mtk", offline_shell(readme_env, tmp_path), readme_env.bin("mtk")
    data, runs = home / "data", home / "runs"
    ckpts = runs / "tiny-corpus" / "checkpoints"

    with step("a fresh clone beside J5's, with the README's venv"):
        sh("git clone", ["git", "clone", "--quiet", str(readme_env.clone), str(home)], tmp_path, env)

    with step("make demo-data: the project's own text and its own BPE, offline"):
        out = sh("make demo-data", ["make", "demo-data", f"VENV={readme_env.venv}"], home, env)
        assert "documents of this project's own text" in out, out[-2000:]
        sizes = {name: (data / name).stat().st_size for name in DATA_FILES}
        assert sum(sizes.values()) < 512 * 1024, sizes
        vocab = json.loads((data / "vocab.json").read_text())
        again = sh("make demo-data again", [readme_env.bin("python"), "examples/make_demo_data.py"], home, env)
        assert "kept" in again, again

    with step("preview the Slurm example offline"):
        out = sh("dry run", [mtk, "launch", "examples/tiny-slurm.yaml", "--dry-run"], home, env)
        assert "backend: slurm" in out and "preprocess.sbatch" in out and "nothing submitted" in out, out[-3000:]

    with step("preview the corpus example"):
        out = sh("dry run", [mtk, "launch", SPEC, "--dry-run"], home, env)
        assert "mtk-entrypoint preprocess" in out and "mtk-entrypoint train" in out, out[-3000:]

    with step("validate infers the backend from the cluster block"):
        out = sh("validate", [mtk, "validate", "examples/gpt-7.5b-p5-slurm.yaml"], home, env)
        assert "backend: slurm" in out, out[-3000:]

    with step("preprocess and train on the corpus"):
        out = sh("launch", [mtk, "launch", SPEC], home, env)
        assert "preprocess: done" in out and "iteration       30/      30" in out, out[-3000:]
        assert tracked(ckpts) == "30", out[-3000:]
        assert not noise(out), noise(out)

    with step("train further: resume, the LR line, then mtk stop"):
        log = tmp_path / "extend.log"
        with open(log, "w") as fh:
            launch = subprocess.Popen([mtk, "launch", SPEC, "--set", "train.iterations=1000"], cwd=home, env=env,
                                      stdout=fh, stderr=subprocess.STDOUT)
        try:
            wait_for("the relaunch's run dir", lambda: run_dir_of(log) or launch.poll() is not None, 600)
            run_dir = run_dir_of(log)
            assert run_dir is not None, log.read_text()[-3000:]
            wait_for("iteration 31", lambda: 31 in train_records(run_dir, killed_writer=True)
                     or launch.poll() is not None, 900)
            assert launch.poll() is None, f"the relaunch ended before mtk stop:\n{log.read_text()[-3000:]}"
            sh("mtk stop", [mtk, "stop", run_dir.name], home, env)
            code = launch.wait(timeout=900)
        finally:
            if launch.poll() is None:  # a failed step must not leave 1,000 iterations training behind it
                run("cancel", [mtk, "cancel", str(run_dir_of(log) or "")], home, env, expect=None)
                launch.wait(timeout=300)
        text = log.read_text()
        assert code == STOPPED, f"mtk launch exited {code}:\n{text[-3000:]}"
        assert "resumed from" in text and "iter_0000030" in text, text[-3000:]
        records = train_records(run_dir)
        stopped_at = int(tracked(ckpts))
        assert min(records) == 31 and max(records) == stopped_at < 1000, (sorted(records), stopped_at)
        lr_lines = [line for line in text.splitlines() if "iteration 31" in line and "30" in line and "1000" in line]
        assert len(lr_lines) == 1 and f"{records[31]['lr']:.6E}" in lr_lines[0], text[-3000:]
        assert not noise(text), noise(text)

    with step("mtk ls and mtk status say STOPPED"):
        rows = {r["name"]: r for r in json.loads(sh("ls", [mtk, "ls", "--json"], home, env))}
        assert (rows[run_dir.name]["state"], rows[run_dir.name]["iteration"]) == ("STOPPED", stopped_at), rows
        out = sh("status", [mtk, "status", run_dir.name], home, env)
        assert "STOPPED" in out, out

    with step("build-image and launches with nothing to reach: exit 2, one line, no run recorded"):
        before = {p.name for p in runs.iterdir()}
        one_error_line(run("build-image", [mtk, "build-image", "examples/tiny.yaml"], home, env, expect=2),
                       "DOCKER_HOST")
        one_error_line(run("eks launch", [mtk, "launch", "examples/gpt-7.5b-p5-eks.yaml", "--no-megatron-check"],
                           home, env, expect=2), "KUBECONFIG")
        one_error_line(run("slurm launch", [mtk, "launch", "examples/tiny-slurm.yaml", "--no-megatron-check"],
                           home, env, expect=2), "--dry-run")
        rows = {r["name"]: r for r in json.loads(sh("ls", [mtk, "ls", "--json"], home, env))}
        claimed = {n: rows[n]["state"] for n in {p.name for p in runs.iterdir()} - before
                   if n in rows and rows[n]["state"] != "FAILED"}
        assert not claimed, claimed

    with step("a bare mtk status and mtk logs after the failed submits"):
        out = sh("status", [mtk, "status"], home, env)
        assert run_dir.name in out and "STOPPED" in out, out
        sh("logs", [mtk, "logs"], home, env)

    with step("mtk convert by run name"):
        hf = tmp_path / "hf"
        out = sh("convert", [mtk, "convert", "tiny-corpus", str(hf)], home, env)
        assert f"(iteration {stopped_at})" in out and (hf / "tokenizer.json").is_file(), out[-3000:]

    with step("transformers from the README's venv loads the export and generates"):
        got = json.loads(run("load", [readme_env.bin("python"), "-c", LOAD, str(hf), PROMPT], home, env)
                         .stdout.splitlines()[-1])
        assert got["vocab"] == len(vocab) and got["eos"] == got["model_eos"] == vocab["<|endoftext|>"], got
        assert got["total"] > got["prompt"] and got["text"].startswith(PROMPT), got

    with step("Ctrl-C on a followed launch saves, with the default DataLoader workers, and reads CANCELLED"):
        log = tmp_path / "ctrl-c.log"
        before_ctrl_c = int(tracked(ckpts))
        with open(log, "w") as fh:  # its own session: the terminal's Ctrl-C reaches the whole foreground group
            launch = subprocess.Popen([mtk, "launch", SPEC, "--set", "train.iterations=1000"], cwd=home, env=env,
                                      stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=as_a_terminal_starts_it)
        try:
            wait_for("the run dir", lambda: run_dir_of(log) or launch.poll() is not None, 600)
            interrupted = run_dir_of(log)
            assert interrupted is not None, log.read_text()[-3000:]
            wait_for("an iteration past the checkpoint", lambda: before_ctrl_c + 1 in train_records(
                interrupted, killed_writer=True) or launch.poll() is not None, 900)
            assert launch.poll() is None, f"the launch ended before Ctrl-C:\n{log.read_text()[-3000:]}"
            os.killpg(launch.pid, signal.SIGINT)
            code = launch.wait(timeout=900)
        finally:
            if launch.poll() is None:
                run("cancel", [mtk, "cancel", str(run_dir_of(log) or "")], home, env, expect=None)
                launch.wait(timeout=300)
        text = log.read_text()
        saved = int(tracked(ckpts))
        assert code == 130 and saved > before_ctrl_c, f"exit {code}, checkpoint {saved}:\n{text[-3000:]}"
        assert f"cancelled at iteration {saved}, checkpoint {saved} saved" in text, text[-3000:]
        assert "Traceback" not in text and "DataLoader worker" not in text, text[-3000:]
        row = {r["name"]: r for r in json.loads(sh("ls", [mtk, "ls", "--json"], home, env))}[interrupted.name]
        assert (row["state"], row["iteration"]) == ("CANCELLED", saved), row
        assert "CANCELLED" in sh("status", [mtk, "status", interrupted.name], home, env)
        report = json.loads(sh("report", [mtk, "report", interrupted.name, "--no-plots", "--no-wandb", "--json"],
                               home, env))
        assert report["ended"].startswith(f"CANCELLED at iteration {saved}"), report["ended"]
