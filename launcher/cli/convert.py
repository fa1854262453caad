"""``mtk convert``: between an mtk/Megatron-LM checkpoint and a Hugging Face model directory.

The direction follows the source: a directory with ``config.json`` is a Hugging Face model (→ a
weights-only torch_dist checkpoint, Megatron-LM's ``release`` layout, usable as ``train.init_from`` or
``--load``); anything else is a checkpoint (its tracked iteration, or one ``iter_N`` dir) → a Hugging Face
directory loadable with ``transformers.AutoModelForCausalLM.from_pretrained``. SOURCE may also be a run (its dir
or its name under --runs-dir, as for the other verbs): its newest checkpoint is converted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .common import SuggestingChoice, runs_dir_option

# What the conversion imports besides torch + megatron-core: pyproject.toml's `convert` extra.
CONVERT_NEEDS = ("safetensors", "tqdm", "tokenizers")


@click.command("convert")
@click.argument("source", metavar="SOURCE")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@runs_dir_option
@click.option("--dtype", type=SuggestingChoice(["float32", "bfloat16", "float16"]), default=None,
              help="Checkpoint → HF: cast the weights (default: as stored).")
@click.option("--make-vocab-size-divisible-by", type=int, default=128, show_default=True,
              help="HF → checkpoint: pad the vocabulary like model.make_vocab_size_divisible_by.")
@click.option("--max-shard-size", type=int, default=2048, show_default=True,
              help="Checkpoint → HF: largest safetensors file, in MiB.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def command(source: str, dest: Path, runs_dir: str, dtype, make_vocab_size_divisible_by, max_shard_size, quiet):
    """Convert SOURCE (a run dir or name: its newest checkpoint; a checkpoint dir; or an HF model dir) into DEST
    (a new directory)."""
    import warnings

    from mtk.extras import MissingExtra, install_command, missing

    absent = missing(CONVERT_NEEDS)
    if absent:
        raise MissingExtra(f"mtk convert needs {' and '.join(absent)}, not installed in this Python "
                           f"({sys.executable}): {install_command('convert')} (or make demo in a checkout)")
    path = _source_dir(source, runs_dir)
    from mtk.training import compat

    compat.install()  # megatron.core's checkpoint code calls CUDA APIs; on a CPU-only machine they become no-ops
    from mtk.training.interop import hf

    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)

    # What cannot convert raises ConversionError / TokenizerExportError / CheckpointNotFound (bad input, exit 2).
    if (path / hf.CONFIG).is_file():
        hf.import_hf(path, dest, make_vocab_size_divisible_by=make_vocab_size_divisible_by,
                     progress=not quiet, log=click.echo)
    else:
        hf.export_hf(path, dest, dtype=dtype, progress=not quiet, max_shard_bytes=max_shard_size * 1024**2,
                     log=click.echo)


def _source_dir(source: str, runs_dir: str) -> Path:
    """SOURCE as a directory: a checkpoint or HF dir as given; a run (dir with run.json, or name) → the checkpoint
    dir its job.json names, whose tracker points at the newest checkpoint."""
    from mtk.exitcodes import BadInput
    from mtk.runs import RECORD, RunNotFound

    from .common import pick_run

    path = Path(source)
    if path.is_dir() and not (path / RECORD).is_file():
        return path
    try:
        run = pick_run(source, runs_dir)
    except RunNotFound:  # said again with what SOURCE may be besides a run
        raise BadInput(
            f"SOURCE '{source}' is neither a directory (a checkpoint or Hugging Face model dir) nor a run: run names "
            f"are looked up under {Path(runs_dir).absolute()}/ (--runs-dir to look elsewhere), and a run's checkpoints "
            "are in the dir its job.json names as train.checkpoint.dir (default <runs_dir>/<name>/checkpoints)"
        ) from None
    from mtk.checkpoint_paths import checkpoint_dir
    from mtk.run_layout import RunLayout
    from mtk.spec.loader import load_job_json

    record = Path(run.record_dir or run.run_dir)
    kept_here = RunLayout.of(record).job_file
    job = load_job_json(kept_here if kept_here.is_file() else run.job_file)
    ckpt = Path(checkpoint_dir(job.train.checkpoint.dir, run.run_dir))  # where the engine wrote
    if not ckpt.is_dir():
        raise BadInput(
            f"SOURCE: run {run.name} ({record}) has no checkpoint here: its checkpoint dir {ckpt} does not exist on "
            "this machine (not saved yet, or on the cluster's filesystem: copy it here and pass that dir)")
    click.echo(f"source: {ckpt} (the checkpoints of run {run.name}, {record})", err=True)
    return ckpt
