"""``train.init_from``: a fresh run's weights from another run's checkpoint or a Hugging Face directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .checkpoint import check_same_model, load_weights
from .checkpoint_layout import resolve_checkpoint_dir


def initialize_from(source: str | Path, model: list, optimizer, job, padded_vocab_size: int, log=print) -> Path:
    """``train.init_from``: copy a checkpoint's or a Hugging Face directory's weights into a fresh run.

    Any TP/PP layout of the source works. Unlike a resume, nothing else is taken: the optimizer moments,
    LR schedule, RNG and data position start from zero, and the run's own checkpoints start at iteration 1."""
    from megatron.core import dist_checkpointing

    src = Path(source)
    if (src / "config.json").is_file():
        _initialize_from_hf(src, model, job)
        if optimizer is not None:
            optimizer.reload_model_params()
        path = src
    else:
        path, _iteration, _release = resolve_checkpoint_dir(src)
        common = dist_checkpointing.load_common_state_dict(str(path))
        check_same_model(path, common, job, padded_vocab_size, "train.init_from")
        load_weights(model, optimizer, path, dist_checkpointing.load_content_metadata(preloaded_state_dict=common))
    log(f"[checkpoint] initialized weights from {path} (train.init_from): a new run, not a resume — optimizer "
        f"state, LR schedule and data position start from zero")
    return path


def _initialize_from_hf(src: Path, model: list, job) -> None:
    """Fill this rank's model shards from an HF directory (every rank reads the full tensors it needs)."""
    from mtk.vocabulary import built

    from .interop import hf

    shape, _arch = hf.shape_from_hf_config(hf.read_hf_config(src), job.model.make_vocab_size_divisible_by)
    m = job.model
    want = {"num_layers": (shape.num_layers, m.num_layers), "hidden_size": (shape.hidden_size, m.hidden_size),
            "ffn_hidden_size": (shape.ffn_hidden_size, m.ffn),
            "num_attention_heads": (shape.num_attention_heads, m.num_attention_heads),
            "num_query_groups": (shape.num_query_groups, m.query_groups),
            "vocab_size": (shape.vocab_size, built(job).size),  # the tokenizer's where one is named
            "position_embedding": ("rope" if shape.rope else "learned_absolute", m.position_embedding),
            "normalization": ("RMSNorm" if shape.rmsnorm else "LayerNorm", m.normalization),
            "norm_epsilon": (shape.norm_epsilon, m.norm_epsilon),
            "activation": ("swiglu" if shape.swiglu else "gelu", m.activation),
            "add_bias_linear": (shape.bias, m.add_bias_linear), "untie_embeddings": (shape.untie, m.untie_embeddings)}
    field = {"vocab_size": "the vocabulary (data.tokenizer's)"} if job.data.tokenizer.type != "NullTokenizer" else {}
    bad = [f"{field.get(k, 'model.' + k)}={ours!r} (the HF model has {theirs!r})"
           for k, (theirs, ours) in want.items() if theirs != ours]
    if bad:
        raise RuntimeError(f"train.init_from: {src} does not fit this job: " + "; ".join(bad)
                           + "; set the model fields to the HF model's"
                           + (" and train with its tokenizer" if field else ""))
    full = {key: t for key, t, _ in hf.megatron_tensors_from_hf(src, m.make_vocab_size_divisible_by, progress=False)}
    fill_model_from_full(model, full, f"train.init_from: {src}")


def fill_model_from_full(model: list, full: dict[str, Any], what: str) -> None:
    """Copy unsharded checkpoint-layout tensors (``decoder.layers.*`` stacked on a leading layer axis) into
    the local shards of ``model``, whatever its TP/PP layout (the slices come from the ShardedTensors)."""
    import torch
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, apply_factories
    from megatron.core.utils import unwrap_model

    from .interop import megatron_lm

    meta = megatron_lm.runtime_metadata(megatron_lm.content_metadata(False))
    with torch.no_grad():
        for chunk in unwrap_model(model):
            sd = chunk.sharded_state_dict(metadata=meta)
            apply_factories(sd)
            for sh in nested_values(sd):
                if not isinstance(sh, ShardedTensor) or "_extra_state" in sh.key:
                    continue
                if sh.key not in full:
                    raise RuntimeError(f"{what} has no weights for {sh.key}")
                t = full[sh.key]
                n = sh.prepend_axis_num
                glob = sh.global_shape
                if t.shape[n] < glob[n]:  # vocabulary padded further for this job's tp
                    t = torch.cat([t, t.new_zeros(*t.shape[:n], glob[n] - t.shape[n], *t.shape[n + 1:])], dim=n)
                index = tuple(sh.global_offset[:n]) + tuple(
                    slice(off, off + size) for off, size in zip(sh.global_offset[n:], sh.local_shape, strict=True))
                sh.data.copy_(t[index].reshape(sh.data.shape))
