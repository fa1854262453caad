"""J3, an MoE user on their own data (issue 28): own JSONL corpus + own byte-level BPE (1,100 tokens: padded to
1,152, neither a multiple of 128 nor the tiny preset's 1,024) → ``mtk launch --backend local`` preprocesses and
trains a 4-expert top-2 MoE at expert parallel 2 → SIGTERM to the train step mid-run saves and exits 42 → the
relaunch resumes on the uninterrupted run's losses → Megatron-LM's own code reads what mtk wrote: its argument
parser over ``megatron_lm_args.txt`` and ``load_args_from_checkpoint`` find the job's vocabulary, padded
vocabulary, parallel sizes and consumed samples, and its ``load_checkpoint`` (``mlm_load_and_continue.py``)
restores the checkpoint so that training continues on the same losses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.faults import Hold
from support.journey import same_losses, step
from support.journey_local import (
    EOT,
    launch,
    losses,
    megatron_lm_reads,
    said,
    sigterm_train_step,
    stdlib_docs,
    tracked,
    train_gpt2_bpe,
    write_jsonl,
)

from mtk import exitcodes
from mtk.vocabulary import padded_vocab

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MLM_LOAD = REPO / "tests" / "integration" / "training" / "megatron_lm" / "mlm_load_and_continue.py"
VOCAB, ITERS, GLOBAL_BATCH = 1100, 12, 8
SPEC = """\
name: {name}
cluster: {{nodes: 1, procs_per_node: 2, device: cpu, runs_dir: {runs}, env: {{OMP_NUM_THREADS: "1"}}}}
model:
  preset: tiny
  moe: {{num_experts: 4, router_topk: 2}}
parallel: {{tp: 1, ep: 2}}
train:
  micro_batch_size: 2
  global_batch_size: {gbs}
  iterations: {iters}
  lr: 3.0e-3
  min_lr: 3.0e-4
  lr_warmup_iters: 2
  precision: fp32
  log_interval: 1
  checkpoint: {{save_interval: {iters}}}
debug: {{env_dump: false}}
data:
  dir: {data}
  corpus: {{input: corpus.jsonl, output_prefix: own/corpus, workers: 1}}
  tokenizer: {{type: GPT2BPETokenizer, vocab_file: vocab.json, merge_file: merges.txt}}
  split: "98,2,0"
  num_workers: 0
"""


def test_j3_moe_ep2_own_bpe_sigterm_resume_and_megatron_lm_reads_it(tmp_path):
    data, runs = tmp_path / "data", tmp_path / "runs"

    def spec(name: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(SPEC.format(name=name, runs=runs, data=data, gbs=GLOBAL_BATCH, iters=ITERS))
        return path

    with step("own corpus and BPE"):
        docs = stdlib_docs()
        write_jsonl(data / "corpus.jsonl", docs)
        vocab = train_gpt2_bpe(docs, data, VOCAB)
        padded = padded_vocab(vocab, 128, 1)
        assert vocab == VOCAB and vocab % 128 and padded != 1024, (vocab, padded)
        assert EOT in json.loads((data / "vocab.json").read_text())

    with step("preprocess and train the MoE at EP=2 uninterrupted (reference)"):
        out, ref = launch(spec("moe-ref"))
        assert out.returncode == 0 and ref, said(out)
        assert (data / "own" / "corpus_text_document.idx").is_file()
        reference = losses(ref)
        assert sorted(reference) == list(range(1, ITERS + 1)), sorted(reference)

    with step("train the same spec; SIGTERM to the train step saves and exits 42"):
        hold = Hold(tmp_path / "hold", after=[2])  # both ranks wait after iteration 2 until SIGTERM has landed
        out, run = launch(spec("moe"), follow=False, env=hold.env())
        assert out.returncode == 0 and run, said(out)
        train = sigterm_train_step(run, hold, at_iteration=2, ranks=2)
        assert train["exit_code"] == exitcodes.REQUEUE, (train, (run / "logs" / "train.log").read_text()[-3000:])
        ckpt = runs / "moe" / "checkpoints"
        saved = int(tracked(ckpt))
        assert saved == 3, saved  # the iteration after the hold, where the ranks acted on the signal
        assert sorted(losses(run)) == list(range(1, saved + 1))
        copy = tmp_path / "at-signal"  # the signal's checkpoint as it was, for Megatron-LM below
        shutil.copytree(ckpt / f"iter_{saved:07d}", copy / f"iter_{saved:07d}")
        (copy / "latest_checkpointed_iteration.txt").write_text(f"{saved}\n")

    with step("the relaunch resumes on the reference's losses"):
        out, again = launch(spec("moe"))
        assert out.returncode == 0 and again, said(out)
        resumed = losses(again)
        assert sorted(resumed) == list(range(saved + 1, ITERS + 1)), sorted(resumed)
        assert same_losses(resumed, {i: reference[i] for i in resumed}), (resumed, reference)
        assert tracked(ckpt) == str(ITERS)

    with step("Megatron-LM's parser and load_args_from_checkpoint read the job's sizes"):
        got = megatron_lm_reads(copy, 2, tmp_path / "mlm_args.json")
        c = got["checkpoint"]
        assert got["check_error"] is None, got["check_error"]
        assert (c["vocab_size"], c["padded_vocab_size"]) == (vocab, padded), c
        assert (c["tensor_model_parallel_size"], c["pipeline_model_parallel_size"],
                c["expert_model_parallel_size"], c["data_parallel_size"]) == (1, 1, 2, 2), c
        assert (c["num_experts"], c["moe_router_topk"]) == (4, 2), c
        assert (c["iteration"], c["consumed_train_samples"]) == (saved, saved * GLOBAL_BATCH), c
        p = got["parsed"]
        assert (p["tensor_model_parallel_size"], p["expert_model_parallel_size"], p["num_experts"]) == (1, 2, 4), p

    with step("Megatron-LM's load_checkpoint restores it and training continues on the same losses"):
        cont = tmp_path / "mlm-continue"
        cont.mkdir()
        job = json.loads((again / "job.json").read_text())
        job["train"]["checkpoint"].update(load=False, save_on_exit=False, save_interval=None,
                                          dir=str(cont / "unused"))
        (cont / "job.json").write_text(json.dumps(job))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(MLM_LOAD),
               "--job", str(cont / "job.json"), "--run-dir", str(cont), "--load", str(copy)]
        res = subprocess.run(cmd, cwd=cont, capture_output=True, text=True, timeout=1200,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert "successfully loaded checkpoint" in res.stdout + res.stderr
        loaded = json.loads((cont / "mlm_load.json").read_text())
        assert (loaded["iteration"], loaded["consumed_train_samples"]) == (saved, saved * GLOBAL_BATCH), loaded
        continued = losses(cont)
        assert sorted(continued) == list(range(saved + 1, ITERS + 1)), sorted(continued)
        assert same_losses(continued, {i: reference[i] for i in continued}), (continued, reference)
