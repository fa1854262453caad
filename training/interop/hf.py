"""Megatron/mtk ``torch_dist`` checkpoints ↔ Hugging Face model directories (config.json + safetensors).

The weight mapping is the declarative table of :mod:`hf_tables`; this module reads and writes the two
formats around it. megatron-bridge (NVIDIA's in-memory HF ↔ Megatron bridge) is not used: it requires
Python ≥ 3.12 and imports Transformer Engine unconditionally (see the issue note), neither of which holds
for mtk's CPU/test environment.

Memory: export reads one checkpoint tensor at a time (all layers of one weight, at full size, from any
TP/PP layout — ``torch_dist`` stores global tensors) and writes safetensors shards of at most
``max_shard_bytes``; import reads one HF tensor group at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mtk import megatron_flags
from mtk.exitcodes import BadInput
from mtk.files import open_mode

from . import hf_tokenizer
from .hf_tables import TABLES, Row, Shape, from_hf, to_hf
from .megatron_lm import recorded_vocab_size

CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
LAYER_PREFIX = "decoder.layers."
# transformers' defaults (LlamaConfig, GPT2Config) for a config.json that leaves its norm epsilon out
HF_NORM_EPS_DEFAULT = {"LlamaForCausalLM": 1e-6, "GPT2LMHeadModel": 1e-5}
HF_NORM_EPS_KEY = {"LlamaForCausalLM": "rms_norm_eps", "GPT2LMHeadModel": "layer_norm_epsilon"}


class ConversionError(BadInput, ValueError):
    """A checkpoint or HF directory this converter cannot map; the message says why and what to do."""


def shape_from_args(args: Any, *, tokenizer_recorded: bool = False) -> Shape:
    """The model's shape from a checkpoint's args. A recorded ``vocab_size`` that cannot pad to the embedding rows
    is refused unless the checkpoint also records its tokenizer (whose vocabulary then wins)."""
    g: Callable[..., Any] = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    heads = g("num_attention_heads")
    groups = g("num_query_groups") if g("group_query_attention", False) else heads
    padded = g("padded_vocab_size")
    vocab = g("vocab_size")
    if vocab is not None and not tokenizer_recorded and recorded_vocab_size(args) is None:
        raise ConversionError(
            f"the checkpoint records vocab_size={vocab}, which does not pad to its {padded} embedding rows (written "
            "by an mtk that recorded model.vocab_size instead of the tokenizer's vocabulary), so the real vocabulary "
            "is unknown; resume the run once with this mtk (it records the tokenizer's vocabulary at the next save) "
            "and convert that checkpoint")
    return Shape(
        num_layers=g("num_layers"), hidden_size=g("hidden_size"),
        ffn_hidden_size=g("ffn_hidden_size") or 4 * g("hidden_size"), num_attention_heads=heads,
        num_query_groups=groups or heads, kv_channels=g("kv_channels") or g("hidden_size") // heads,
        vocab_size=vocab or padded, padded_vocab_size=padded,
        max_position_embeddings=g("max_position_embeddings"),
        rope=g("position_embedding_type", "learned_absolute") == "rope", rotary_base=float(g("rotary_base", 10000)),
        rmsnorm=g("normalization", "LayerNorm") == "RMSNorm", swiglu=bool(g("swiglu", False)),
        bias=bool(g("add_bias_linear", True)), untie=bool(g("untie_embeddings_and_output_weights", False)),
        # a checkpoint that does not record it trained with the spec's default (mtk before --norm-epsilon)
        norm_epsilon=float(g(megatron_flags.recorded_name("model.norm_epsilon"),
                             megatron_flags.spec_default("model.norm_epsilon"))),
        num_experts=g("num_experts") or 0,
        layernorm_1p=bool(g("apply_layernorm_1p", False) or g("layernorm_zero_centered_gamma", False)))


def hf_architecture(s: Shape) -> str:
    """LlamaForCausalLM or GPT2LMHeadModel, or a ConversionError listing what has no HF equivalent."""
    if s.num_experts:
        raise ConversionError(f"a mixture-of-experts model ({s.num_experts} experts) has no Llama or GPT-2 "
                              "equivalent; export supports dense Llama and GPT presets")
    if s.layernorm_1p:
        raise ConversionError("the checkpoint's norms are zero-centred (model.layernorm_1p: the stored weight is "
                              "gamma - 1); export copies norm weights as they are, so it refuses them rather than "
                              "write wrong ones; export a model trained with layernorm_1p: false")
    if s.rope and s.rmsnorm and s.swiglu:
        return "LlamaForCausalLM"
    gpt2_needs = {"learned absolute positions (model.position_embedding=learned_absolute)": not s.rope,
                  "LayerNorm (model.normalization=LayerNorm)": not s.rmsnorm,
                  "GELU (model.activation=gelu)": not s.swiglu,
                  "linear biases (model.add_bias_linear=true)": s.bias,
                  "tied input/output embeddings (model.untie_embeddings=false)": not s.untie,
                  "multi-head attention (model.num_query_groups = num_attention_heads)":
                      s.num_query_groups == s.num_attention_heads}
    missing = [k for k, ok in gpt2_needs.items() if not ok]
    if not missing:
        return "GPT2LMHeadModel"
    raise ConversionError("this model has no Hugging Face equivalent: LlamaForCausalLM needs RoPE + RMSNorm + "
                          "SwiGLU, and GPT2LMHeadModel needs " + ", ".join(gpt2_needs) + "; it lacks "
                          + ", ".join(missing))


def hf_config(s: Shape, arch: str, dtype: str) -> dict[str, Any]:
    if arch == "LlamaForCausalLM":
        return {"architectures": [arch], "model_type": "llama", "vocab_size": s.vocab_size,
                "hidden_size": s.hidden_size, "intermediate_size": s.ffn_hidden_size,
                "num_hidden_layers": s.num_layers, "num_attention_heads": s.num_attention_heads,
                "num_key_value_heads": s.num_query_groups, "head_dim": s.kv_channels,
                "max_position_embeddings": s.max_position_embeddings, "hidden_act": "silu",
                HF_NORM_EPS_KEY[arch]: s.norm_epsilon, "rope_theta": s.rotary_base,
                "rope_parameters": {"rope_type": "default", "rope_theta": s.rotary_base},
                "attention_bias": s.bias, "mlp_bias": s.bias, "tie_word_embeddings": not s.untie,
                "torch_dtype": dtype, "dtype": dtype}
    return {"architectures": [arch], "model_type": "gpt2", "vocab_size": s.vocab_size,
            "n_positions": s.max_position_embeddings, "n_embd": s.hidden_size, "n_layer": s.num_layers,
            "n_head": s.num_attention_heads, "n_inner": s.ffn_hidden_size, "activation_function": "gelu",
            HF_NORM_EPS_KEY[arch]: s.norm_epsilon, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
            "tie_word_embeddings": True, "torch_dtype": dtype, "dtype": dtype}


def shape_from_hf_config(cfg: dict[str, Any], make_vocab_size_divisible_by: int = 128) -> tuple[Shape, str]:
    from mtk.vocabulary import padded_vocab

    archs = cfg.get("architectures") or [cfg.get("model_type", "?")]
    arch = archs[0]
    if arch not in TABLES:
        raise ConversionError(f"{CONFIG}: architecture {arch!r} is not supported; mtk converts "
                              f"{' and '.join(sorted(TABLES))}")
    if arch == "LlamaForCausalLM":
        heads = cfg["num_attention_heads"]
        rope = cfg.get("rope_parameters") or {}
        if rope.get("rope_type", "default") not in ("default", None) or cfg.get("rope_scaling"):
            raise ConversionError(f"{CONFIG}: RoPE scaling {rope or cfg.get('rope_scaling')} has no mtk equivalent")
        s = Shape(num_layers=cfg["num_hidden_layers"], hidden_size=cfg["hidden_size"],
                  ffn_hidden_size=cfg["intermediate_size"], num_attention_heads=heads,
                  num_query_groups=cfg.get("num_key_value_heads") or heads,
                  kv_channels=cfg.get("head_dim") or cfg["hidden_size"] // heads, vocab_size=cfg["vocab_size"],
                  padded_vocab_size=padded_vocab(cfg["vocab_size"], make_vocab_size_divisible_by, 1),
                  max_position_embeddings=cfg["max_position_embeddings"], rope=True,
                  rotary_base=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))), rmsnorm=True,
                  swiglu=True, bias=bool(cfg.get("attention_bias", False)),
                  untie=not cfg.get("tie_word_embeddings", False), norm_epsilon=_norm_epsilon(cfg, arch))
    else:
        if cfg.get("activation_function", "gelu_new") != "gelu":
            raise ConversionError(f"{CONFIG}: activation_function={cfg.get('activation_function', 'gelu_new')!r}"
                                  " (tanh GELU) differs from megatron-core's exact GELU; only 'gelu' converts "
                                  "without changing the model's outputs")
        h = cfg["n_embd"]
        s = Shape(num_layers=cfg["n_layer"], hidden_size=h, ffn_hidden_size=cfg.get("n_inner") or 4 * h,
                  num_attention_heads=cfg["n_head"], num_query_groups=cfg["n_head"], kv_channels=h // cfg["n_head"],
                  vocab_size=cfg["vocab_size"],
                  padded_vocab_size=padded_vocab(cfg["vocab_size"], make_vocab_size_divisible_by, 1),
                  max_position_embeddings=cfg["n_positions"], rope=False, rotary_base=10000.0, rmsnorm=False,
                  swiglu=False, bias=True, untie=False, norm_epsilon=_norm_epsilon(cfg, arch))
    return s, arch


def _norm_epsilon(cfg: dict[str, Any], arch: str) -> float:
    return float(cfg.get(HF_NORM_EPS_KEY[arch], HF_NORM_EPS_DEFAULT[arch]))


# --------------------------------------------------------------------------- plumbing


@contextlib.contextmanager
def single_process_group() -> Iterator[None]:
    """torch_dist reading/writing needs a process group; a conversion is one process."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="tensor", disable=not enabled)


class ShardWriter:
    """Writes HF tensors into safetensors files of at most ``max_bytes`` (plus the index when > 1 file)."""

    def __init__(self, out: Path, max_bytes: int):
        self.out, self.max_bytes = out, max_bytes
        self.pending: dict[str, Any] = {}
        self.pending_bytes = 0
        self.files: list[tuple[str, list[str]]] = []
        self.total = 0

    def add(self, name: str, tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + size > self.max_bytes:
            self._flush()
        self.pending[name] = tensor
        self.pending_bytes += size
        self.total += size

    def _flush(self) -> None:
        from safetensors.torch import save_file

        name = f"model-{len(self.files) + 1:05d}.safetensors"
        save_file(self.pending, str(self.out / name), metadata={"format": "pt"})
        os.chmod(self.out / name, 0o644)  # safetensors creates 0600 files; a model directory is for sharing
        self.files.append((name, list(self.pending)))
        self.pending, self.pending_bytes = {}, 0

    def finish(self) -> None:
        if self.pending:
            self._flush()
        if len(self.files) == 1:
            os.replace(self.out / self.files[0][0], self.out / SINGLE)
            return
        weight_map = {t: f"model-{i + 1:05d}-of-{len(self.files):05d}.safetensors"
                      for i, (_, names) in enumerate(self.files) for t in names}
        for i, (name, _) in enumerate(self.files):
            os.replace(self.out / name, self.out / f"model-{i + 1:05d}-of-{len(self.files):05d}.safetensors")
        (self.out / INDEX).write_text(json.dumps({"metadata": {"total_size": self.total},
                                                  "weight_map": weight_map}, indent=1))


def _model_keys(meta: dict[str, Any]) -> set[str]:
    return {k for k in meta if not k.startswith(("optimizer.", "rng_state", "rerun_state_machine"))
            and "_extra_state" not in k}


def export_hf(checkpoint: str | Path, out: str | Path, *, dtype: str | None = None, progress: bool = True,
              max_shard_bytes: int = 2 * 1024**3, log: Callable[[str], None] = print) -> Path:
    """Write the HF directory ``out`` (config.json + safetensors) from a torch_dist checkpoint."""
    import torch
    from megatron.core import dist_checkpointing

    from ..checkpoint_layout import resolve_checkpoint_dir

    path, iteration, _release = resolve_checkpoint_dir(checkpoint)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConversionError(f"{out} exists and is not empty; choose a new output directory")
    with single_process_group():
        common = dist_checkpointing.load_common_state_dict(str(path))
        if common.get("args") is None:
            raise ConversionError(f"{path} has no 'args' in its common state (written by an mtk older than "
                                  "Megatron-LM-compatible checkpoints); resume it once with this mtk and save")
        tokenizer = hf_tokenizer.of_checkpoint(common)
        s = shape_from_args(common["args"], tokenizer_recorded=tokenizer is not None)
        s = _vocab_of_tokenizer(s, tokenizer, path, log)
        arch = hf_architecture(s)
        table = TABLES[arch]
        meta = dist_checkpointing.load_tensors_metadata(str(path))
        model_keys = _model_keys(meta)
        mapped = {r.megatron for r in table}
        unmapped = sorted(model_keys - mapped)
        if unmapped:
            raise ConversionError(f"{path}: weights {unmapped} have no place in {arch}; this model is not a "
                                  f"plain {arch}")
        if arch == "LlamaForCausalLM" and s.untie != ("output_layer.weight" in meta):
            raise ConversionError(f"{path}: args say untie_embeddings_and_output_weights={s.untie} but "
                                  f"output_layer.weight is {'absent' if s.untie else 'present'}")
        rows = [r for r in table if r.megatron in meta or not r.optional]
        tmp = out.with_name(out.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(mode=0o700)  # private until renamed: nothing in it can be redirected by another user's link
        writer = ShardWriter(tmp, max_shard_bytes)
        out_dtype = getattr(torch, dtype) if dtype else None
        with _progress(len(rows), f"export {arch}", progress) as bar:
            for row in rows:
                if row.megatron not in meta:
                    raise ConversionError(f"{path}: checkpoint has no {row.megatron}, which {arch} needs")
                full = dist_checkpointing.load({row.megatron: meta[row.megatron]}, str(path),
                                               validate_access_integrity=False)[row.megatron]
                for name, tensor in _rows_to_hf(row, full, s):
                    writer.add(name, tensor.to(out_dtype) if out_dtype else tensor)
                del full
                bar.update(1)
        writer.finish()
        saved_dtype = str(out_dtype or meta[rows[0].megatron].dtype).removeprefix("torch.")
        ids = hf_tokenizer.write_hf(tokenizer, tmp, s.vocab_size, s.max_position_embeddings)
        (tmp / CONFIG).write_text(json.dumps(hf_config(s, arch, saved_dtype) | hf_tokenizer.config_ids(ids), indent=1))
        if tokenizer is not None:
            (tmp / GENERATION_CONFIG).write_text(json.dumps(hf_tokenizer.generation_config(ids), indent=1))
        if out.exists():
            out.rmdir()
        open_mode(tmp)
        os.replace(tmp, out)
    log(f"[convert] wrote {arch} ({s.num_layers} layers, hidden {s.hidden_size}) from {path} "
        f"(iteration {iteration}) to {out}")
    if tokenizer is None:
        log(f"[convert] note: {path} records no tokenizer (data.tokenizer.type: NullTokenizer — mock or "
            "pre-tokenized data — or a checkpoint written before mtk recorded it): no tokenizer files were "
            "written and config.json has eos_token_id/bos_token_id null; add the tokenizer the data was "
            "tokenized with to the directory before using it")
    else:
        log(f"[convert] tokenizer: {hf_tokenizer.describe(tokenizer)}; eos_token_id {ids.eos}, "
            f"bos_token_id {ids.bos}")
    return out


def _vocab_of_tokenizer(s: Shape, tokenizer: dict[str, Any] | None, path: Path, log: Callable[[str], None]) -> Shape:
    """The HF vocabulary is the tokenizer's: an mtk checkpoint written before ``args.vocab_size`` recorded it
    carries the spec's ``model.vocab_size`` instead (the embedding rows were built from the tokenizer)."""
    if tokenizer is None or tokenizer["vocab_size"] == s.vocab_size:
        return s
    if tokenizer["vocab_size"] > s.padded_vocab_size:
        raise ConversionError(f"{path}: its tokenizer has {tokenizer['vocab_size']} tokens but the model only "
                              f"{s.padded_vocab_size} embedding rows; this checkpoint's tokenizer record is wrong")
    log(f"[convert] note: {path} records args.vocab_size={s.vocab_size} but was trained with a tokenizer of "
        f"{tokenizer['vocab_size']} tokens; exporting {tokenizer['vocab_size']} rows")
    return dataclasses.replace(s, vocab_size=tokenizer["vocab_size"])


def _rows_to_hf(row: Row, full, s: Shape) -> Iterator[tuple[str, Any]]:
    if row.megatron.startswith(LAYER_PREFIX):
        for i in range(full.shape[0]):
            for name, t in zip(row.hf, to_hf(row.kind, full[i], s), strict=True):
                yield name.format(i=i), t
    else:
        yield from zip(row.hf, to_hf(row.kind, full, s), strict=True)


# --------------------------------------------------------------------------- HF → Megatron


class HFReader:
    """Lazy access to the tensors of an HF directory (single file or index + shards)."""

    def __init__(self, hf_dir: Path):
        self.dir = hf_dir
        if (hf_dir / INDEX).is_file():
            self.where = json.loads((hf_dir / INDEX).read_text())["weight_map"]
        elif (hf_dir / SINGLE).is_file():
            from safetensors import safe_open

            with safe_open(str(hf_dir / SINGLE), "pt") as f:
                self.where = {k: SINGLE for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
        else:
            raise ConversionError(f"{hf_dir} has neither {SINGLE} nor {INDEX} (only safetensors weights convert)")

    def get(self, name: str):
        from safetensors import safe_open

        with safe_open(str(self.dir / self.where[name]), "pt") as f:
            return f.get_tensor(name)

    def __contains__(self, name: str) -> bool:
        return name in self.where


def read_hf_config(hf_dir: str | Path) -> dict[str, Any]:
    hf_dir = Path(hf_dir)
    if not (hf_dir / CONFIG).is_file():
        raise ConversionError(f"{hf_dir} has no {CONFIG}; expected a Hugging Face model directory")
    return json.loads((hf_dir / CONFIG).read_text())


def megatron_tensors_from_hf(hf_dir: str | Path, make_vocab_size_divisible_by: int = 128,
                             progress: bool = True) -> Iterator[tuple[str, Any, Shape]]:
    """(megatron key, full tensor — layers stacked on a leading axis, shape) for each table row present."""
    import torch

    hf_dir = Path(hf_dir)
    s, arch = shape_from_hf_config(read_hf_config(hf_dir), make_vocab_size_divisible_by)
    reader = HFReader(hf_dir)
    table = TABLES[arch]
    consumed: set[str] = set()
    rows = [r for r in table if r.hf[0].format(i=0) in reader or not r.optional]
    if arch == "LlamaForCausalLM" and not s.untie:
        rows = [r for r in rows if r.megatron != "output_layer.weight"]
    with _progress(len(rows), f"import {arch}", progress) as bar:
        for row in rows:
            if row.megatron.startswith(LAYER_PREFIX):
                per_layer = []
                for i in range(s.num_layers):
                    names = [n.format(i=i) for n in row.hf]
                    per_layer.append(from_hf(row.kind, [reader.get(n) for n in names], s))
                    consumed.update(names)
                full = torch.stack(per_layer)
            else:
                full = from_hf(row.kind, [reader.get(n) for n in row.hf], s)
                consumed.update(row.hf)
            bar.update(1)
            yield row.megatron, full, s
    left = sorted(k for k in reader.where if k not in consumed and not k.endswith(".attn.bias")
                  and not (arch == "GPT2LMHeadModel" and k == "lm_head.weight")
                  and not (arch == "LlamaForCausalLM" and not s.untie and k == "lm_head.weight"))
    if left:
        raise ConversionError(f"{hf_dir}: weights {left[:5]}{'…' if len(left) > 5 else ''} have no place in mtk's "
                              f"{arch} mapping")


def spec_of_shape(s: Shape, make_vocab_size_divisible_by: int = 128) -> dict[str, Any]:
    """The ``model`` spec fields of an imported model (what a run training it sets)."""
    return {"num_layers": s.num_layers, "hidden_size": s.hidden_size, "ffn_hidden_size": s.ffn_hidden_size,
            "num_attention_heads": s.num_attention_heads, "num_query_groups": s.num_query_groups,
            "seq_length": s.max_position_embeddings, "max_position_embeddings": s.max_position_embeddings,
            "position_embedding": "rope" if s.rope else "learned_absolute", "rotary_base": s.rotary_base,
            "normalization": "RMSNorm" if s.rmsnorm else "LayerNorm", "norm_epsilon": s.norm_epsilon,
            "activation": "swiglu" if s.swiglu else "gelu", "add_bias_linear": s.bias, "untie_embeddings": s.untie,
            "vocab_size": s.vocab_size, "make_vocab_size_divisible_by": make_vocab_size_divisible_by}


def megatron_args_for(s: Shape, make_vocab_size_divisible_by: int = 128) -> argparse.Namespace:
    """Megatron-LM args describing an imported model (TP=PP=1, weights only): the flag table's model, layout and
    checkpoint rows for the model's spec fields, and the checkpoint's state."""
    from mtk.spec.job import Job

    job = Job.model_validate({"name": "hf-import", "model": spec_of_shape(s, make_vocab_size_divisible_by)})
    values = megatron_flags.args_values(
        job, runtime={"vocab_size": s.vocab_size, "padded_vocab_size": s.padded_vocab_size, "head_dim": s.kv_channels,
                      "weights_only": True}, sections=("model", "parallel", "train.checkpoint"))
    return argparse.Namespace(**values, world_size=1, data_parallel_size=1,
                              use_dist_ckpt=True, consumed_train_samples=0, skipped_train_samples=0,
                              consumed_valid_samples=0)


def import_hf(hf_dir: str | Path, out_root: str | Path, *, make_vocab_size_divisible_by: int = 128,
              progress: bool = True, log: Callable[[str], None] = print) -> Path:
    """Write a weights-only torch_dist checkpoint (Megatron-LM's ``release`` convention) from an HF dir."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    from .. import checkpoint_layout
    from . import megatron_lm

    out_root = Path(out_root)
    if out_root.exists() and any(out_root.iterdir()):
        raise ConversionError(f"{out_root} exists and is not empty; choose a new output directory")
    release = out_root / checkpoint_layout.RELEASE
    tmp = out_root.with_name(out_root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(mode=0o700)  # private until renamed: nothing in it can be redirected by another user's link
    (tmp / checkpoint_layout.RELEASE).mkdir()
    with single_process_group():
        model: dict[str, Any] = {}
        shape = None
        for key, full, s in megatron_tensors_from_hf(hf_dir, make_vocab_size_divisible_by, progress):
            model[key] = ShardedTensor.from_rank_offsets(key, full, replica_id=0)
            shape = s
        assert shape is not None
        tokenizer = hf_tokenizer.from_hf_dir(Path(hf_dir))
        extras: dict[str, Any] = {"imported_from": str(Path(hf_dir).resolve())}
        if tokenizer is not None:
            extras[hf_tokenizer.KEY] = tokenizer
        sd = {"model": model, "args": megatron_args_for(shape, make_vocab_size_divisible_by),
              "checkpoint_version": megatron_lm.CHECKPOINT_VERSION,
              "iteration": 0, "num_floating_point_operations_so_far": 0.0, megatron_lm.MTK_KEY: extras}
        meta = megatron_lm.content_metadata(False)
        dist_checkpointing.save(sd, str(tmp / checkpoint_layout.RELEASE), content_metadata=meta)
    (tmp / checkpoint_layout.TRACKER).write_text(checkpoint_layout.RELEASE + "\n")
    if out_root.exists():
        out_root.rmdir()
    open_mode(tmp)
    os.replace(tmp, out_root)
    log(f"[convert] wrote a weights-only checkpoint ({release}) from {hf_dir} with "
        f"{hf_tokenizer.describe(tokenizer)}")
    return out_root
