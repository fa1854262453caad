"""``mtk convert``: between an mtk/Megatron-LM checkpoint and a Hugging Face model directory.

The direction follows the source: a directory with ``config.json`` is a Hugging Face model (→ a
weights-only torch_dist checkpoint, Megatron-LM's ``release`` layout, usable as ``train.init_from`` or
``--load``); anything else is a checkpoint (its tracked iteration, or one ``iter_N`` dir) → a Hugging Face
directory loadable with ``transformers.AutoModelForCausalLM.from_pretrained``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

# What the conversion imports besides torch + megatron-core: pyproject.toml's `convert` extra.
CONVERT_NEEDS = ("safetensors", "tqdm", "tokenizers")


@click.command("convert")
@click.argument("source", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="Checkpoint → HF: cast the weights (default: as stored).")
@click.option("--make-vocab-size-divisible-by", type=int, default=128, show_default=True,
              help="HF → checkpoint: pad the vocabulary like model.make_vocab_size_divisible_by.")
@click.option("--max-shard-size", type=int, default=2048, show_default=True,
              help="Checkpoint → HF: largest safetensors file, in MiB.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def command(source: Path, dest: Path, dtype, make_vocab_size_divisible_by, max_shard_size, quiet):
    """Convert SOURCE (checkpoint dir or HF model dir) into DEST (a new directory)."""
    import importlib.util
    import warnings

    missing = [m for m in CONVERT_NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise click.ClickException(f"mtk convert needs {' and '.join(missing)}, not installed in this Python "
                                   f"({sys.executable}): pip install 'mtk[convert]' (or make demo in a checkout)")
    from mtk.training import compat

    compat.install()  # megatron.core's checkpoint code calls CUDA APIs; on a CPU-only machine they become no-ops
    from mtk.training.interop import hf

    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)

    try:
        if (source / hf.CONFIG).is_file():
            hf.import_hf(source, dest, make_vocab_size_divisible_by=make_vocab_size_divisible_by,
                         progress=not quiet, log=click.echo)
        else:
            hf.export_hf(source, dest, dtype=dtype, progress=not quiet, max_shard_bytes=max_shard_size * 1024**2,
                         log=click.echo)
    except (hf.ConversionError, hf.hf_tokenizer.TokenizerExportError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
