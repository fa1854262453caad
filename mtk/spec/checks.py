"""Cross-field checks that run before any cluster time is spent.

Each check is a small function ``(job, backend) -> list[Problem]`` so a failure names both fields and values,
and all problems are reported at once — beside the field errors, too: a spec whose sections do not all validate is
checked with each failed section standing in as :class:`InvalidSection`, and a check that reads one is skipped
(:class:`SectionInvalid`), so every rule over valid sections still speaks.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from mtk.megatron_index import pair_problem

from .errors import Problem
from .parallel_checks import (
    attention_fits_parallelism,
    global_batch_divisible,
    gpus_divisible_by_model_parallel,
    heads_divisible_by_tp,
    layers_divisible_by_pp,
    moe_sizes,
    seq_fits_positions,
    sequence_parallel_needs_tp,
    spare_nodes_keep_the_batch,
)
from .safety_checks import credentials_by_reference, fetch_is_pinned, fetch_items_are_safe

if TYPE_CHECKING:
    from .job import Job

Check = Callable[["Job", "str | None"], list[Problem]]


class SectionInvalid(Exception):
    """Internal control flow: a check read a section whose own fields failed validation (an
    :class:`InvalidSection`); :func:`run_checks` skips that check, whose answer would rest on nothing."""


class InvalidSection:
    """Stands in a partly valid Job for a section that failed validation: reading it raises SectionInvalid."""

    __slots__ = ("section",)

    def __init__(self, section: str):
        object.__setattr__(self, "section", section)

    def __getattr__(self, name: str):
        raise SectionInvalid(self.section)

    def _refuse(self, *_args: object) -> bool:
        raise SectionInvalid(self.section)

    __bool__ = __iter__ = __len__ = __eq__ = __contains__ = _refuse
    __hash__ = None  # type: ignore[assignment]


# In the order problems are reported: the parallel arithmetic first.
CHECKS: list[Check] = [gpus_divisible_by_model_parallel, heads_divisible_by_tp, layers_divisible_by_pp,
                       global_batch_divisible, spare_nodes_keep_the_batch, seq_fits_positions,
                       sequence_parallel_needs_tp, attention_fits_parallelism, moe_sizes]


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


@check
def precision_fits_device(job: Job, backend) -> list[Problem]:
    t, c = job.train, job.cluster
    if c.device == "cpu" and t.precision in ("fp16", "fp8"):
        return [Problem("train.precision", f"{t.precision} needs a GPU; use bf16 or fp32 with "
                        "cluster.device: cpu", t.precision)]
    return []


@check
def schedule_is_sane(job: Job, backend) -> list[Problem]:
    t = job.train
    out = []
    if t.min_lr > t.lr:
        out.append(Problem("train.min_lr", f"is above train.lr ({t.lr})", t.min_lr))
    if t.lr_warmup_fraction is not None and t.lr_warmup_iters:
        out.append(Problem("train.lr_warmup_fraction", f"is set with train.lr_warmup_iters ({t.lr_warmup_iters}); "
                           "give the warmup one way: Megatron-LM accepts only one of --lr-warmup-fraction and "
                           "--lr-warmup-iters", t.lr_warmup_fraction))
    if t.lr_warmup_iters and t.lr_warmup_iters >= (t.lr_decay_iters or t.iterations):
        # Megatron-Core's scheduler asserts warmup < decay on every rank at start-up.
        out.append(Problem("train.lr_warmup_iters", f"is as long as or longer than the decay horizon "
                           f"({t.lr_decay_iters or t.iterations} iterations); Megatron-Core needs warmup < decay: "
                           "lower it or train longer",
                           t.lr_warmup_iters))
    from mtk.batch_schedule import BatchSchedule

    horizon = max(t.iterations, t.lr_decay_iters or 0)
    tokens = BatchSchedule.of(job).samples(horizon) * job.model.seq_length
    if tokens > 2**63 - 1:  # Megatron counts samples and tokens in int64 (dataset indices, the LR schedule)
        field = "train.iterations" if horizon == t.iterations else "train.lr_decay_iters"
        batch = "the samples of train.batch_size_schedule" if t.batch_size_schedule else \
            f"train.global_batch_size ({t.global_batch_size})"
        out.append(Problem(field, f"× {batch} × model.seq_length ({job.model.seq_length}) = {tokens:.3g} tokens, "
                           "past the 64-bit counters Megatron's datasets and schedule use; lower it", horizon))
    return out


@check
def batch_schedule_is_megatron_lms(job: Job, backend) -> list[Problem]:
    """A batch-size schedule as Megatron-LM's calculator takes it: its thresholds in whole samples (tokens ÷
    model.seq_length) start at 0 and increase; it ends at train.global_batch_size."""
    t = job.train
    steps = t.batch_size_schedule
    if not steps:
        return []
    out = []
    if steps[-1].global_batch_size != t.global_batch_size:
        out.append(Problem("train.global_batch_size", f"differs from the last step of train.batch_size_schedule "
                           f"({steps[-1].global_batch_size}); leave it out (it is the schedule's last batch) or make "
                           "the two agree", t.global_batch_size))
    seq = job.model.seq_length
    samples = [s.tokens // seq for s in steps]
    shown = " ".join(f"{s.tokens}:{s.global_batch_size}" for s in steps)
    if samples[0] != 0:
        out.append(Problem("train.batch_size_schedule", f"the first step starts at {steps[0].tokens} tokens = "
                           f"{samples[0]} samples of model.seq_length {seq}; it must start at 0 (Megatron-LM's "
                           "calculator refuses another start): add a step at 0 tokens", shown))
    pairs = list(itertools.pairwise(zip(steps, samples, strict=True)))
    same = [(a.tokens, b.tokens) for (a, x), (b, y) in pairs if x == y]
    if same:
        named = ", ".join(f"{a} and {b}" for a, b in same)
        out.append(Problem("train.batch_size_schedule", f"steps at {named} tokens start at the same sample (tokens ÷ "
                           f"model.seq_length {seq}, rounded down); Megatron-LM refuses thresholds that do not "
                           "increase: move them at least one sequence apart", shown))
    smaller = [f"{b.global_batch_size} after {a.global_batch_size}" for (a, _), (b, _) in pairs
               if b.global_batch_size < a.global_batch_size]
    if smaller:
        out.append(Problem("train.batch_size_schedule", f"the global batch shrinks ({', '.join(smaller)}); "
                           "Megatron-LM's training loop stops when the number of micro-batches decreases: keep each "
                           "step's batch at least the one before", shown))
    return out


@check
def corpus_beside_a_mixture_has_a_weight(job: Job, backend) -> list[Problem]:
    """A corpus mixed with weighted blend/folder entries must say its share; 1.0 beside 0.3/0.7 is a guess."""
    d = job.data
    if d.corpus is None or d.corpus.weight is not None or not (d.blend or d.folders):
        return []
    listed = {d.resolve(b.prefix) for b in d.blend}
    if not d.folders and all(p in listed for p in d.corpus_prefixes()):
        return []  # the blend names the corpus' own prefixes with their weights: nothing is guessed
    given = ", ".join(f"{b.prefix}={b.weight:g}" for b in d.blend) or ", ".join(
        f"{f.path}={f.weight:g}" for f in d.folders)
    return [Problem("data.corpus.weight", f"required when data.blend/data.folders are given too ({given}): set "
                    "the corpus' share in the same units, e.g. data.corpus.weight: 0.5")]


@check
def profiler_is_wired_for_backend(job: Job, backend) -> list[Problem]:
    """Nsight Systems wraps the node agent where a backend renders it so; elsewhere it would be silently ignored."""
    if not job.debug.nsys.enabled or backend is None or _backend(backend).runs_nsys:
        return []
    from mtk.backends import backend_classes

    wired = "/".join(cls.name for cls in backend_classes() if cls.runs_nsys)
    return [Problem("debug.nsys.enabled", f"Nsight Systems capture is wired into the {wired} backend only, not "
                    f"{backend}; use debug.torch_profiler (every backend) or --backend {wired}", True)]


@check
def tokenizer_has_files(job: Job, backend) -> list[Problem]:
    d = job.data
    tok = d.tokenizer
    out = []
    needs = {"GPT2BPETokenizer": ("vocab_file", "merge_file"), "HuggingFaceTokenizer": ("model",),
             "GPTSentencePieceTokenizer": ("model",)}.get(tok.type, ())
    for field in needs:
        if getattr(tok, field) is None:
            out.append(Problem(f"data.tokenizer.{field}", f"required for tokenizer type {tok.type}"))
    if d.corpus is not None and tok.type == "NullTokenizer":
        out.append(Problem("data.tokenizer.type", "preprocessing a corpus needs a real tokenizer: "
                           "GPT2BPETokenizer, HuggingFaceTokenizer or GPTSentencePieceTokenizer", tok.type))
    return out


@check
def backend_rules(job: Job, backend) -> list[Problem]:
    """What the chosen backend needs of a job: each backend states its own rules (``Backend.validate``)."""
    return _backend(backend).validate(job) if backend else []


@check
def env_not_owned_by_the_launcher(job: Job, backend) -> list[Problem]:
    """RANK, MASTER_ADDR, SLURM_*, ... belong to torchrun, Slurm or mtk (see :mod:`.env_names`)."""
    from .env_names import reserved_env_problems

    return reserved_env_problems(list(job.cluster.env), job.cluster.secret_names)


def _backend(name: str):
    from mtk.backends import backend_class

    return backend_class(name)


CHECKS.extend([credentials_by_reference, fetch_items_are_safe, fetch_is_pinned])


def _file_problems(job: Job) -> list[Problem]:
    """Inputs that must exist when the run starts, unless an earlier step of this run produces them."""
    d = job.data
    fetched = {d.resolve(f.path or f.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".xz")
                         .removesuffix(".gz").removesuffix(".zst")) for f in d.fetch}
    produced = set(d.corpus_prefixes())
    out = []
    for i, item in enumerate(d.blend):
        prefix = d.resolve(item.prefix)
        if prefix in produced:
            continue
        missing = False
        for ext in (".bin", ".idx"):
            if not os.path.exists(prefix + ext):
                missing = True
                out.append(Problem(f"data.blend.{i}.prefix", f"{prefix}{ext} does not exist; run preprocess "
                                   "first or fix the prefix (without .bin/.idx)", item.prefix))
        damage = None if missing else pair_problem(prefix)
        if damage:
            out.append(Problem(f"data.blend.{i}.prefix", f"{damage}; run preprocess again for this prefix",
                               item.prefix))
    for i, folder in enumerate(d.folders):
        if not os.path.isdir(d.resolve(folder.path)):
            out.append(Problem(f"data.folders.{i}.path", "folder does not exist", folder.path))
    for field in ("vocab_file", "merge_file", "model"):
        value = getattr(d.tokenizer, field)
        if value and d.resolve(value) not in fetched and not os.path.exists(d.resolve(value)):
            out.append(Problem(f"data.tokenizer.{field}", f"{d.resolve(value)} does not exist and no "
                               "data.fetch item downloads it", value))
    if d.corpus is not None:
        src = d.resolve(d.corpus.input)
        if src not in fetched and not os.path.exists(src):
            out.append(Problem("data.corpus.input", f"{src} does not exist and no data.fetch item downloads it",
                               d.corpus.input))
    return out


def run_checks(job: Job, backend: str | None = None, check_files: bool = False) -> list[Problem]:
    """Every cross-field check; file checks only where the launching machine sees the data. A check that reads a
    section standing in as invalid (:class:`InvalidSection`) is left out."""
    problems = [p for fn in CHECKS for p in _answer(fn, job, backend)]
    if check_files:
        problems += _answer(lambda j, _backend: _file_problems(j), job, backend)
    return problems


def _answer(fn: Check, job: Job, backend: str | None) -> list[Problem]:
    try:
        return fn(job, backend)
    except SectionInvalid:
        return []
