"""J1, a Slurm user on their own data: own JSONL corpus + own byte-level BPE (vocabulary 1,500: not a multiple of
128 and not the tiny preset's 1024) → preprocess as a 4-task array → train on 2 nodes → USR2 → the requeued job
resumes its own checkpoint (the regression of issue 28: refused on 853e4ca) on the uninterrupted run's losses →
relaunch at tp=1 (reshard) → ``mtk convert`` to HF → transformers loads it and generates → ``mtk report A B``."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest
from support.faults import Hold
from support.journey import same_losses, step
from support.slurm_harness import metrics

pytestmark = pytest.mark.integration

VOCAB = 1500
ITERS, SAVE = 12, 4
TRAIN = {"iterations": ITERS, "checkpoint.save_interval": SAVE, "eval_interval": None, "lr_warmup_iters": 2}


def _write_corpus_and_tokenizer(data: Path) -> int:
    """The user's corpus (stdlib sources as JSONL) and a BPE trained on it; returns the tokenizer's vocabulary."""
    from tokenizers import ByteLevelBPETokenizer

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = [p.read_text(encoding="utf-8", errors="replace")[:12000] for p in sorted(stdlib.glob("*.py"))[:120]]
    data.mkdir(parents=True)
    with open(data / "corpus.jsonl", "w") as fh:
        fh.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(docs, vocab_size=VOCAB, special_tokens=["<|endoftext|>"], show_progress=False)
    tok.save_model(str(data))
    return tok.get_vocab_size()


def _errors(log: str) -> str:
    """What a failed train step said: its error lines (or the log's tail when there are none)."""
    return "\n".join(ln for ln in log.splitlines() if "error" in ln.lower())[-4000:] or log[-3000:]


def _spec(h, name: str, data: Path) -> Path:
    return h.spec(name, mock=False, train=TRAIN, data={
        "dir": str(data), "num_workers": 0,
        "corpus": {"input": "corpus.jsonl", "output_prefix": "own/corpus", "json_keys": ["text"], "workers": 1,
                   "shards": 4, "shard_mb": 0.2}})


def test_j1_own_bpe_array_preprocess_usr2_requeue_reshard_convert_report(slurm, mtk_venv):
    h, venv = slurm, f"cluster.slurm.venv={mtk_venv}"
    data = h.root / "shared data"

    with step("own corpus and BPE"):
        vocab = _write_corpus_and_tokenizer(data)
        assert vocab == VOCAB and vocab % 128 and vocab != 1024, vocab

    with step("preprocess as a 4-task array, then train uninterrupted on 2 nodes (reference A)"):
        a = h.launch(_spec(h, "ref", data), venv)
        ids = h.run_record(a)["ids"]
        assert list(ids) == ["preprocess", "train"]
        seen = {(s["step"], s["state"]) for s in h.status(a)}
        assert ("train", "PENDING") in seen, seen  # waits for the preprocess array (afterok)
        h.wait_state(a, {"RUNNING"}, timeout=900)
        assert h.state(a, "preprocess")["state"] == "COMPLETED"
        streamed = h.mtk("logs", str(a), "-f", timeout=900).stdout  # follows train until it ends
        assert f"iteration {ITERS:8d}/{ITERS:8d}" in streamed, streamed[-3000:]
        assert h.wait_state(a, {"COMPLETED"}, timeout=60)["exit_code"] == 0
        logs = [(a / "logs" / f"preprocess-{ids['preprocess']}_{i}.out").read_text() for i in range(4)]
        assert all(f"task {i} of 4:" in text for i, text in enumerate(logs)), logs
        assert (data / "own" / "corpus_text_document.idx").exists()
        train_log = (a / "logs" / f"train-{ids['train']}.out").read_text()
        assert "0: mtk: node node1" in train_log and "1: mtk: node node2" in train_log
        assert f"{mtk_venv}/bin/python" in train_log  # the venv was activated on every node
        reference = metrics(a)
        assert sorted(reference) == list(range(1, ITERS + 1)), reference

    with step("train B on the same data; USR2 mid-run saves and requeues"):
        hold = Hold(h.root / "hold", after=[5])  # both ranks wait after iteration 5 until USR2 has landed
        b = h.launch(_spec(h, "own", data), venv, env=hold.env())
        job = h.run_record(b)["ids"]["train"]
        h.wait("both ranks to wait after iteration 5", lambda: hold.held(5, ranks=2), timeout=600)
        h.slurm("scancel", "--signal=USR2", "--batch", job)
        h.wait("a rank to catch USR2", lambda: hold.signalled(5), timeout=300)
        hold.release(5)
        h.wait("the save and requeue",
               lambda: "on a signal; restarting" in (b / "state" / "events.log").read_text(), timeout=300)
        events = (b / "state" / "events.log").read_text()
        saved = int(events.split("saved checkpoint=")[1].split()[0])
        assert saved == 6, events  # the iteration after the hold, where the ranks acted on the signal

    with step("the requeued job resumes its own checkpoint on the reference's losses"):
        done = h.wait_state(b, {"COMPLETED", "FAILED"}, timeout=600)
        log = (b / "logs" / f"train-{job}.out").read_text()
        assert done["state"] == "COMPLETED" and "restarts=1" in done["reason"], (done, _errors(log))
        assert f"train: job {job}, restart 1" in log and "restart 1:" in log  # SLURM_RESTART_COUNT logged
        assert same_losses(metrics(b), reference), (metrics(b), reference)
        ckpt = h.root / "runs" / "own" / "checkpoints"
        assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(ITERS)

    with step("relaunch at tp=1: resharded resume continues to 16"):
        c = h.launch(_spec(h, "own", data), venv, "parallel.tp=1", "train.iterations=16")
        done = h.wait_state(c, {"COMPLETED", "FAILED"}, timeout=600)
        c_log = (c / "logs" / f"train-{h.run_record(c)['ids']['train']}.out").read_text()
        assert done["state"] == "COMPLETED", (done, _errors(c_log))
        assert sorted(metrics(c)) == list(range(ITERS + 1, 17)), metrics(c)
        assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "16"

    hf = h.root / "hf"
    with step("mtk convert to Hugging Face"):
        h.mtk("convert", str(ckpt), str(hf), "--quiet", timeout=600)
        config = json.loads((hf / "config.json").read_text())
        assert config["vocab_size"] >= vocab, config

    with step("transformers loads the export and generates"):
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(hf)
        ids_in = torch.tensor([[1, 2, 3]])
        out = model.generate(ids_in, max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert out.shape == (1, 7), out.shape

    with step("transformers loads the export with its tokenizer and generates text"):
        from transformers import AutoTokenizer

        assert config["vocab_size"] == vocab, config
        tok = AutoTokenizer.from_pretrained(hf)
        assert len(tok) == vocab
        assert config.get("eos_token_id") == tok.eos_token_id is not None, (config, tok.eos_token_id)
        text = tok.decode(model.generate(**tok("def main", return_tensors="pt"), max_new_tokens=4,
                                         do_sample=False)[0])
        assert text.startswith("def main"), text

    with step("mtk report A B"):
        out = h.mtk("report", str(a), str(b), "--out", str(h.root / "cmp"), timeout=300)
        assert "ref" in out.stdout and "own" in out.stdout, out.stdout
