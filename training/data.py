"""Training data: mock data or a weighted blend of indexed ``.bin/.idx`` prefixes, and a resumable sampler.

Prefixes come from ``data.blend`` (resolved against ``data.dir``), the prefixes the preprocess step writes
(``data.corpus``), and every prefix under ``data.folders`` (via ``mtk.mixture``). Datasets are built
with megatron.core's ``BlendedMegatronDatasetBuilder`` + ``GPTDataset`` (index cache in ``data.cache_dir`` or
``<data.dir>/index-cache``, which must be shared between nodes).

The sampler is a pure function of ``consumed_samples``: the checkpoint stores that number and a resumed run
continues with exactly the samples the interrupted run would have drawn next.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtk.spec import Job


@dataclass(frozen=True)
class TokenizerInfo:
    """What the engine needs from a tokenizer: the vocabulary size (incl. added tokens) and the EOD id."""

    vocab_size: int
    eod: int
    # What checkpoints record of the tokenizer (its files included; interop.hf_tokenizer); None for NullTokenizer.
    record: dict[str, Any] | None = field(default=None, compare=False, repr=False)


def tokenizer_info(job: Job) -> TokenizerInfo:
    """NullTokenizer-style ids for mock/pre-tokenized data; the real tokenizer's sizes otherwise."""
    tok = job.data.tokenizer
    if tok.type == "NullTokenizer":
        return TokenizerInfo(job.model.vocab_size, job.model.vocab_size - 1)
    from mtk.tokenizers import build_tokenizer  # the data helper's module; loaded only here

    from .interop import hf_tokenizer

    t = build_tokenizer(tok, job.data.dir)
    return TokenizerInfo(int(t.vocab_size), int(t.eod), hf_tokenizer.record(t))


def blend(job: Job, log: Callable[[str], None] | None = None) -> tuple[list[str], list[float]]:
    """(prefixes, weights) of the training blend; empty for mock data. ``log`` gets the folder-mixture
    table (tokens per source, effective weights)."""
    d = job.data
    prefixes = [d.resolve(b.prefix) for b in d.blend]
    weights = [b.weight for b in d.blend]
    for prefix in d.corpus_prefixes():
        if prefix not in prefixes:
            prefixes.append(prefix)
            weights.append(d.corpus.weight if d.corpus and d.corpus.weight else 1.0)  # weight required beside a blend
    if d.folders:
        from mtk.mixture import expand_folders  # the data helper's module; loaded only here

        for prefix, weight in expand_folders(d, log=log):
            prefixes.append(prefix)
            weights.append(float(weight))
    return prefixes, weights


def check_prefixes(prefixes: list[str]) -> None:
    """Fail before building indices if a prefix lacks its .bin or .idx (names the file and the fix)."""
    for prefix in prefixes:
        for ext in (".bin", ".idx"):
            if not os.path.exists(prefix + ext):
                raise FileNotFoundError(f"data prefix {prefix}: {prefix}{ext} does not exist; run the preprocess "
                                        "step or fix data.blend / data.folders")


SPLIT_NAMES = ("train", "valid", "test")


def effective_split(job: Job, sizes: list[int]) -> str:
    """The split handed to Megatron.

    mtk never samples the test split, so when no test samples are requested its share joins valid: train
    boundaries stay exactly where ``data.split`` puts them, and Megatron never builds an unused test split
    (it loops forever building a split that has zero documents, which 949,50,1 gives any small prefix).
    """
    train, valid, test = (float(x) for x in job.data.split.split(","))
    if sizes[2] == 0 and test > 0:
        valid, test = valid + test, 0.0
    return ",".join(f"{x:g}" for x in (train, valid, test))


def check_split_documents(prefixes: list[str], split: str) -> None:
    """Refuse a prefix whose built split would get no documents, naming it and the fix, instead of hanging."""
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
    for prefix in prefixes:
        documents = IndexedDataset(prefix, mmap=True).document_indices.shape[0] - 1
        for name, bounds in zip(SPLIT_NAMES, matrix, strict=True):
            if bounds is None:
                continue
            if round(bounds[1] * documents) - round(bounds[0] * documents) == 0:
                raise ValueError(
                    f"data prefix {prefix}: the {name} split of data.split (as used: {split}) gets none of its "
                    f"{documents} documents; use more data per prefix or change data.split "
                    f"(or turn off evaluation with train.eval_interval: null)")


def cache_dir(job: Job, run_dir: str | None = None) -> str:
    """data.cache_dir; else mock data's index (a run file) in the run dir; else ``<data.dir>/index-cache``, shared
    by every run of the same data and built once by the preprocess step."""
    d = job.data
    if d.cache_dir:
        return d.cache_dir
    if d.mock and run_dir:
        return os.path.join(run_dir, "index-cache")
    return os.path.join(d.dir, "index-cache")


def split_sizes(job: Job) -> list[int]:
    """Samples to build per split: all training steps (the samples they consume: Megatron-LM's train samples, which
    decide the dataset's epochs and so its order), and enough validation batches for every eval."""
    from mtk.batch_schedule import BatchSchedule

    t = job.train
    train = BatchSchedule.of(job).samples(t.iterations)
    evals = (t.iterations // t.eval_interval + 1) if t.eval_interval else 0
    return [train, evals * t.eval_iters * t.global_batch_size, 0]


NULL_TOKENIZER_MODULE = "megatron.core.tokenizers.text.libraries.null_tokenizer"


def null_tokenizer_class() -> Any:
    """megatron-core's ``NullTokenizer``, the only tokenizer its datasets need here (ids and the EOD id).

    Imported by file, not through its package: ``megatron.core.tokenizers.text``'s ``__init__`` imports the
    Hugging Face tokenizer wrapper and with it ``transformers`` — 2.8 CPU s per rank of every launch, for a
    class that imports nothing. The module keeps its own name (the datasets' cache keys name the class), and a
    later import of the package finds it in ``sys.modules``.
    """
    import importlib.util
    import sys

    import megatron.core.tokenizers as tokenizers  # the base classes only: cheap

    module = sys.modules.get(NULL_TOKENIZER_MODULE)
    if module is None:
        path = Path(tokenizers.__file__).parent / "text" / "libraries" / "null_tokenizer.py"
        spec = importlib.util.spec_from_file_location(NULL_TOKENIZER_MODULE, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[NULL_TOKENIZER_MODULE] = module
    return module.NullTokenizer


def build_datasets(job: Job, info: TokenizerInfo, log: Callable[[str], None] | None = None,
                   run_dir: str | None = None) -> tuple[Any, Any]:
    """(train, valid) datasets; valid is None when the split gives it no data or eval is off."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
    NullTokenizer = null_tokenizer_class()
    prefixes, weights = blend(job, log)
    mock = not prefixes
    sizes = split_sizes(job)
    split = effective_split(job, sizes)
    if not mock:
        check_prefixes(prefixes)
        check_split_documents(prefixes, split)
    os.makedirs(cache_dir(job, run_dir), exist_ok=True)
    config = GPTDatasetConfig(
        random_seed=job.train.seed,
        sequence_length=job.model.seq_length,
        blend=None if mock else (prefixes, weights),
        split=split,
        path_to_cache=cache_dir(job, run_dir),
        tokenizer=NullTokenizer(info.vocab_size, eod_id=info.eod),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        mid_level_dataset_surplus=0.005,
    )
    cls = MockGPTDataset if mock else GPTDataset
    train, valid, _test = BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, config).build()
    return train, valid


class ResumableSampler:
    """Yields this data-parallel rank's micro-batch indices, starting after ``consumed_samples``.

    Global order is sample 0, 1, 2, ...; each step of ``micro_batch × dp`` samples is cut into dp slices
    (Megatron's pretraining sampler). Being a function of ``consumed_samples`` makes resume exact.
    """

    def __init__(self, total: int, consumed_samples: int, micro_batch_size: int, dp_rank: int, dp_size: int):
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"dp_rank {dp_rank} out of range for dp_size {dp_size}")
        self.total = total
        self.consumed = consumed_samples
        self.mbs = micro_batch_size
        self.dp_rank = dp_rank
        self.dp_size = dp_size

    def __iter__(self) -> Iterator[list[int]]:
        step = self.mbs * self.dp_size
        start = self.consumed
        while start + step <= self.total:
            lo = start + self.dp_rank * self.mbs
            yield list(range(lo, lo + self.mbs))
            start += step


# Signals that end a run: Ctrl-C's SIGINT, SIGTERM (cancel, scancel, preemption, a pod's end), SIGUSR2 (Slurm's
# time-limit warning). A group-wide one reaches the DataLoader's workers too (torchrun's shutdown signals each
# rank's process group, Slurm every process of the step).
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR2")


def ignore_stop_signals(_worker_id: int = 0) -> None:
    """DataLoader ``worker_init_fn``: a worker outlives the run's stop signal so that only its rank decides.

    A worker that died of it would make its rank raise "DataLoader worker ... is killed by signal" in the middle of
    the save the signal asked for. The rank ends its workers when it is done (:func:`close_batches`); one whose
    rank died without that ends on its own (torch's worker loop watches its parent)."""
    import signal

    for name in STOP_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_IGN)


def batches(dataset, sampler: ResumableSampler, num_workers: int, pin_memory: bool = False) -> Iterator[dict]:
    """An endless-enough iterator of collated micro-batches (torch DataLoader over the sampler).

    ``pin_memory`` (GPU runs) makes the host-to-device copy in :func:`to_device` asynchronous. Worker processes
    ignore the run's stop signals (:func:`ignore_stop_signals`); :func:`close_batches` ends them.
    """
    import torch

    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=num_workers,
                                         pin_memory=pin_memory, persistent_workers=num_workers > 0,
                                         worker_init_fn=ignore_stop_signals if num_workers > 0 else None)
    return iter(loader)


def close_batches(iterator: Iterator[dict] | None) -> None:
    """End the DataLoader's worker processes now, while the rank is alive: they ignore SIGTERM, so the interpreter's
    exit-time ``terminate()`` + ``join()`` of daemon processes would wait for them instead."""
    shutdown = getattr(iterator, "_shutdown_workers", None)  # torch's own teardown: sentinel, join, then terminate
    if shutdown is not None:
        shutdown()
    for worker in getattr(iterator, "_workers", []):  # one stuck past torch's terminate (which it ignores)
        if worker.is_alive():
            worker.kill()
            worker.join()


def to_device(batch: dict) -> dict:
    """A new batch dict with every tensor on the current accelerator (non-blocking: no host sync).

    On CPU the compat layer maps this to the host and its strict mode records the move, so a forward that
    receives a batch that skipped this step fails on CPU as it would on a GPU.
    """
    import torch

    return {k: v.cuda(non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def for_context_parallel_rank(batch: dict, cp_size: int) -> dict:
    """This context-parallel rank's share of the sequence (megatron-core's load-balanced 2×cp chunking,
    ``get_batch_on_this_cp_rank``); the batch unchanged when ``cp_size`` is 1."""
    if cp_size == 1:
        return batch
    from megatron.core import parallel_state as ps
    from megatron.core.utils import get_batch_on_this_cp_rank

    return get_batch_on_this_cp_rank(dict(batch), is_hybrid_cp=False, cp_group=ps.get_context_parallel_group())


def cyclic_batches(dataset, micro_batch_size: int, dp_rank: int, dp_size: int) -> Iterator[dict]:
    """Validation batches: the same fixed sequence every evaluation, wrapping around the dataset."""
    import torch

    n = len(dataset)
    start = 0
    while True:
        lo = start + dp_rank * micro_batch_size
        items = [dataset[(lo + i) % n] for i in range(micro_batch_size)]
        yield torch.utils.data.default_collate(items)
        start = (start + micro_batch_size * dp_size) % n
