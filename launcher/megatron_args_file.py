"""``megatron_lm_args.txt`` before the run: the pretrain_gpt.py arguments the run starts as, written by ``mtk render``,
``mtk launch --dry-run`` and ``mtk launch`` beside the other run files, so a user can diff them with the Megatron-LM
script the spec came from (``mtk import SCRIPT --show-args``).

The run writes the same arguments beside each checkpoint (``training/loop.py``'s side files): the same functions of
:mod:`mtk.training.interop.megatron_lm`, the same job, iteration 0 and no samples consumed. A pure function of the
job; the one thing only the run knows, ``data.folders``' prefixes (their files decide them), is said in the file.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mtk.backends import Artifacts
    from mtk.spec import Job

FILE = "megatron_lm_args.txt"


def args_file(job: Job) -> str:
    from mtk.training.interop import megatron_lm

    from mtk import megatron_flags
    from mtk.checkpoint_paths import default_dir
    from mtk.vocabulary import padded_vocab

    p, vocab = job.parallel, job.model.vocab_size
    padded = padded_vocab(vocab, job.model.make_vocab_size_divisible_by, p.tp)
    args = megatron_lm.megatron_args(job, data_parallel_size=job.cluster.world_size // (p.tp * p.pp * p.cp),
                                     vocab_size=vocab, padded_vocab_size=padded, consumed_train_samples=0,
                                     iteration=0)
    root = job.train.checkpoint.dir or default_dir(job.cluster.runs_dir, job.name)
    folders = bool(job.data.folders)
    if folders:  # their prefixes come from their files when the run starts: left to it, and said
        job = job.model_copy(update={"data": job.data.model_copy(update={"folders": []})})
    argv = megatron_lm.pretrain_gpt_argv(args, job, root)
    if folders:  # without its folders the job reads as mock data: the table's row for that is left out
        mock = next(f.flag for f in megatron_flags.FLAGS if f.runtime == "mock")
        argv = [a for a in argv if a != mock]
    text = megatron_lm.args_file_text(argv, 0, job)
    head = [f"# Megatron-LM pretrain_gpt.py arguments mtk run {job.name!r} starts with, at world size "
            f"{job.cluster.world_size} (tp × pp × cp × dp), for Megatron-LM core_r0.19.0:",
            f'#   . {FILE} && torchrun --nnodes N --nproc-per-node G ... pretrain_gpt.py '
            f'"${{{megatron_lm.ARGS_ARRAY}[@]}}"',
            "# Written by mtk from the spec before the run; each checkpoint's megatron_lm_args.txt continues the run "
            "from there.",
            "# Compare with the Megatron-LM script: diff <(mtk import SCRIPT --show-args | sort) <(grep -v '^#' "
            "THIS_FILE | sort)"]
    if folders:
        head.append("# data.folders: their prefixes and weights join --data-path when the run starts (the folders' "
                    "files decide them); they are not below.")
    return "\n".join(head) + "\n" + text[text.index(f"{megatron_lm.ARGS_ARRAY}=("):]


def with_args_file(artifacts: Artifacts, job: Job) -> Artifacts:
    """``artifacts`` with :data:`FILE` among the run files."""
    return dataclasses.replace(artifacts, files={**artifacts.files, FILE: args_file(job)})
