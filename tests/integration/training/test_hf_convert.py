"""``mtk convert`` between mtk checkpoints and Hugging Face directories, checked with transformers itself.

A tiny GPT (GPT-2 architecture) and a tiny Llama (RoPE, RMSNorm, SwiGLU, GQA 4 heads / 2 groups, untied
output layer, Llama-2's norm epsilon 1e-6) are trained by mtk at TP=2, PP=2 (torchrun, 4 CPU ranks, gloo, fp32)
and exported; the HF directories load with ``transformers.AutoModelForCausalLM`` and give mtk's logits
(megatron-core's model loading the same checkpoint at TP=PP=1) within 1e-4. HF → mtk → HF is bitwise per tensor.

The export carries the run's tokenizer: a GPT trained on a small corpus of real text (CPython's own library
sources) tokenized by mtk's preprocess step with a byte-level BPE trained here (1,501 tokens, not the preset's
1,024) exports to a directory that ``AutoTokenizer`` + ``AutoModelForCausalLM`` load alone and ``generate``
from, with the tokenizer's ``<|endoftext|>`` as ``eos_token_id``. HF import keeps it for the run it starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
ARCHS = {
    "gpt": (),
    "llama": ("model.arch=llama", "model.position_embedding=rope", "model.normalization=RMSNorm",
              "model.activation=swiglu", "model.add_bias_linear=false", "model.num_query_groups=2",
              "model.untie_embeddings=true", "model.norm_epsilon=1e-6"),  # Llama-2's rms_norm_eps, not the default
}
TRAIN = ("train.precision=fp32", "train.iterations=3", "train.lr_warmup_iters=1", "train.lr=0.01")
BPE_VOCAB = 1500  # + <|endoftext|>: 1,501 tokens, padded to 1,536 rows at tp=2
BPE_DATA = ("data.corpus.input=corpus.jsonl", "data.corpus.output_prefix=bpe", "data.tokenizer.type=GPT2BPETokenizer",
            "data.tokenizer.vocab_file=vocab.json", "data.tokenizer.merge_file=merges.txt")


def mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def _safetensors(d: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


@pytest.fixture(scope="module", params=sorted(ARCHS))
def exported(request, tr, engine_root):
    arch = request.param
    run = engine_root / f"hf_{arch}_tp2pp2"
    tr.make_job(run, *ARCHS[arch], *TRAIN, "cluster.procs_per_node=4", "parallel.tp=2", "parallel.pp=2")
    assert tr.finish(tr.start(run, nproc=4), timeout=900) == 0, (run / "run.log").read_text()[-3000:]
    hf_dir = engine_root / f"hf_{arch}_export"
    res = mtk("convert", str(run / "checkpoints"), str(hf_dir), "--quiet", cwd=engine_root)
    assert res.returncode == 0, res.stderr
    single = engine_root / f"hf_{arch}_tp1"
    tr.make_job(single, *ARCHS[arch], *TRAIN, "cluster.procs_per_node=1", "parallel.tp=1", "parallel.pp=1")
    out = single / "logits.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           str(HERE / "hf" / "logits.py"), "--job", str(single / "job.json"),
           "--checkpoint", str(run / "checkpoints"), "--hf", str(hf_dir), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=single, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return arch, run, hf_dir, json.loads(out.read_text())


def test_export_from_tp2_pp2_matches_transformers_logits(exported):
    arch, _run, hf_dir, logits = exported
    cfg = json.loads((hf_dir / "config.json").read_text())
    assert cfg["architectures"] == [{"gpt": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}[arch]]
    # the spec's epsilon, trained with and exported: transformers' logits below agree only if both used it
    assert {"gpt": cfg.get("layer_norm_epsilon"), "llama": cfg.get("rms_norm_eps")}[arch] == \
        {"gpt": 1e-5, "llama": 1e-6}[arch]
    assert logits["shape"] == [2, 64, 1024]
    assert logits["logit_scale"] > 0.1  # real logits, not zeros
    assert logits["max_abs_diff"] <= 1e-4, logits
    assert logits["argmax_equal"] == 1.0, logits


def test_hf_to_mtk_to_hf_is_bitwise(exported, engine_root):
    arch, _run, hf_dir, _ = exported
    ckpt = engine_root / f"hf_{arch}_imported"
    back = engine_root / f"hf_{arch}_roundtrip"
    res = mtk("convert", str(hf_dir), str(ckpt), "--quiet", cwd=engine_root)
    assert res.returncode == 0, res.stderr
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "release"
    res = mtk("convert", str(ckpt), str(back), "--quiet", cwd=engine_root)
    assert res.returncode == 0, res.stderr
    import torch

    a, b = _safetensors(hf_dir), _safetensors(back)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].view(-1).view(torch.uint8).equal(b[name].view(-1).view(torch.uint8)), name
    assert json.loads((hf_dir / "config.json").read_text()) == json.loads((back / "config.json").read_text())


def test_unsupported_architecture_is_refused(tmp_path):
    src = tmp_path / "mistral"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}))
    res = mtk("convert", str(src), str(tmp_path / "out"), cwd=tmp_path)
    assert res.returncode == 2  # bad input: the refusal is the exit code of every BadInput
    assert "MistralForCausalLM" in res.stderr and "not supported" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_mock_data_export_writes_no_tokenizer_and_no_ids(exported):
    _arch, _run, hf_dir, _ = exported
    cfg = json.loads((hf_dir / "config.json").read_text())
    # null, not the family default (GPT-2's 50256, Llama's 1/2): transformers would otherwise fill those in
    assert cfg["eos_token_id"] is None and cfg["bos_token_id"] is None
    assert not [p.name for p in hf_dir.iterdir() if "token" in p.name or p.name in ("vocab.json", "merges.txt")]
    assert not (hf_dir / "generation_config.json").exists()


# --------------------------------------------------------------------------- the run's own tokenizer


def _real_docs() -> list[str]:
    """Real text: CPython's own library sources (what every machine with this Python has), 80 documents."""
    lib = Path(os.__file__).parent
    return [p.read_text(encoding="utf-8", errors="replace")[:12000] for p in sorted(lib.glob("[a-s]*.py"))[:80]]


def _train_bpe(docs: list[str], out: Path) -> None:
    """A GPT-2-style byte-level BPE (vocab.json + merges.txt), trained with the tokenizers library."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=BPE_VOCAB, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.model.save(str(out))


@pytest.fixture(scope="module")
def bpe_export(tr, engine_root):
    """mtk's path for a user's own data: JSONL + own BPE → preprocess → train (tp=2) → mtk convert."""
    run = engine_root / "hf_bpe"
    data = run / "data"
    data.mkdir(parents=True)
    docs = _real_docs()
    (data / "corpus.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    _train_bpe(docs, data)
    job = tr.make_job(run, *BPE_DATA, *TRAIN)
    pre = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "preprocess", "--job", str(job),
                          "--no-progress"], capture_output=True, text=True, timeout=600)
    assert pre.returncode == 0, pre.stdout[-2000:] + pre.stderr[-2000:]
    assert (data / "bpe_text_document.idx").exists()
    assert tr.finish(tr.start(run), timeout=900) == 0, (run / "run.log").read_text()[-3000:]
    hf_dir = engine_root / "hf_bpe_export"
    res = mtk("convert", str(run / "checkpoints"), str(hf_dir), "--quiet", cwd=engine_root)
    assert res.returncode == 0, res.stderr
    return run, hf_dir, docs, res.stdout


def _mtk_tokenizer(run: Path):
    from mtk.spec import load_job_json
    from mtk.tokenizers import build_tokenizer

    job = load_job_json(run / "job.json")
    return build_tokenizer(job.data.tokenizer, job.data.dir)


def test_export_loads_with_its_tokenizer_and_generates(bpe_export):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, hf_dir, docs, stdout = bpe_export
    ours = _mtk_tokenizer(run)
    assert ours.vocab_size == BPE_VOCAB + 1 != 1024
    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir))
    model = AutoModelForCausalLM.from_pretrained(str(hf_dir))
    cfg = json.loads((hf_dir / "config.json").read_text())
    gen = json.loads((hf_dir / "generation_config.json").read_text())
    assert cfg["vocab_size"] == ours.vocab_size == model.get_input_embeddings().weight.shape[0]
    assert cfg["eos_token_id"] == gen["eos_token_id"] == tokenizer.eos_token_id == ours.eod == BPE_VOCAB
    assert model.generation_config.eos_token_id == ours.eod
    assert f"eos_token_id {ours.eod}" in stdout
    for doc in docs[:10]:  # the ids the model was trained on
        assert tokenizer(doc[:2000]).input_ids == ours.encode(doc[:2000])
    prompt = tokenizer("def main(", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > prompt.input_ids.shape[1]
    assert isinstance(tokenizer.decode(out[0]), str)


def test_checkpoint_carries_the_megatron_lm_arguments_for_its_data_and_tokenizer(bpe_export):
    from mtk.training.interop import megatron_lm
    from support.megatron_args_file import read_args_file

    run, _hf_dir, _docs, _ = bpe_export
    ckpt = run / "checkpoints"
    argv = read_args_file((ckpt / "iter_0000003" / megatron_lm.ARGS_FILE).read_text())
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    assert flag("--tokenizer-type") == "GPT2BPETokenizer"
    assert flag("--vocab-file") == str(run / "data" / "vocab.json")
    assert flag("--merge-file") == str(run / "data" / "merges.txt")
    assert argv[argv.index("--data-path") + 1:argv.index("--data-path") + 3] == ["1.0", str(run / "data" /
                                                                                          "bpe_text_document")]
    assert flag("--load") == flag("--save") == str(ckpt.resolve())
    assert "--mock-data" not in argv and "--no-position-embedding" not in argv


def test_hf_import_keeps_the_tokenizer_for_the_run_it_starts(bpe_export, tr, engine_root):
    """HF dir → checkpoint → HF dir keeps the tokenizer; a mock-data run started from the HF dir records it too."""
    from transformers import AutoTokenizer

    run, hf_dir, docs, _ = bpe_export
    ckpt = engine_root / "hf_bpe_imported"
    assert mtk("convert", str(hf_dir), str(ckpt), "--quiet", cwd=engine_root).returncode == 0
    back = engine_root / "hf_bpe_roundtrip"
    res = mtk("convert", str(ckpt), str(back), "--quiet", cwd=engine_root)
    assert res.returncode == 0, res.stderr
    tokenizer = AutoTokenizer.from_pretrained(str(back))
    assert tokenizer(docs[0][:2000]).input_ids == _mtk_tokenizer(run).encode(docs[0][:2000])
    assert json.loads((back / "config.json").read_text())["eos_token_id"] == BPE_VOCAB

    child = engine_root / "hf_bpe_init_from"  # mock data, no tokenizer of its own: it keeps the HF dir's
    tr.make_job(child, f"train.init_from={hf_dir}", f"model.vocab_size={BPE_VOCAB + 1}", *TRAIN)
    assert tr.finish(tr.start(child), timeout=900) == 0, (child / "run.log").read_text()[-3000:]
    assert "checkpoints keep the tokenizer of" in (child / "run.log").read_text()
    again = engine_root / "hf_bpe_init_from_export"
    assert mtk("convert", str(child / "checkpoints"), str(again), "--quiet", cwd=engine_root).returncode == 0
    assert AutoTokenizer.from_pretrained(str(again)).eos_token_id == BPE_VOCAB
