"""Logits of mtk's model (megatron-core GPTModel, TP=PP=1) from a checkpoint vs. transformers' from an HF dir.

``torchrun --nproc-per-node 1 logits.py --job JOB.json --checkpoint CKPT --hf HF_DIR --out OUT.json``
(test scaffolding). The checkpoint may have any TP/PP layout: torch_dist reshards on load. Writes the max
absolute logit difference and the argmax agreement over a fixed batch of random tokens.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--job", "--checkpoint", "--hf", "--out"):
        ap.add_argument(name, required=True)
    a = ap.parse_args()
    from mtk.training import compat

    compat.install()
    import torch
    from mtk.training import checkpoint, device_plan, distributed, model

    from mtk.spec import load_job_json

    job = load_job_json(Path(a.job))
    distributed.init(job, True)
    plan = device_plan.plan(job, gpu=False, te=False)
    cfg = model.transformer_config(job, plan)
    chunks = model.build_model(job, cfg, None, plan)
    path, _, _ = checkpoint.resolve_checkpoint_dir(a.checkpoint)
    checkpoint.load_weights(chunks, None, path, None)
    net = chunks[0].eval()

    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(a.hf, dtype=torch.float32).eval()
    vocab = hf.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (2, job.model.seq_length), generator=gen)
    pos = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
    with torch.no_grad():
        ours = net(tokens.cuda(), pos.cuda(), None)[..., :vocab].float()  # the engine's path: inputs on the device
        theirs = hf(tokens).logits.float()
    Path(a.out).write_text(json.dumps({
        "max_abs_diff": float((ours - theirs).abs().max()),
        "argmax_equal": float((ours.argmax(-1) == theirs.argmax(-1)).float().mean()),
        "logit_scale": float(ours.abs().max()), "shape": list(ours.shape)}))


if __name__ == "__main__":
    main()
