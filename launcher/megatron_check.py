"""Validation by megatron-core itself: its config objects and the model, built on the meta device.

``mtk validate`` and ``mtk launch`` run this before anything is submitted, so every refusal megatron-core
would make at model build (a ``TransformerConfig`` assertion, a layer that refuses its sizes, the LR
scheduler's own checks, the engine's preflight) is reported as a field-named error on the laptop instead of
after queueing. Nothing is allocated: parameters live on ``torch.device("meta")``, and the process groups of
the whole job come from torch's fake backend (one process plays rank 0 of the job's world size).

It runs in a child process (``python -m mtk.launcher.megatron_check``) because megatron-core keeps parallel
state in module globals and the CPU compat layer patches torch: the CLI's own process stays clean and light.
Where torch/megatron-core are not installed (a login node with the base install, ``pip install .`` in a clone) the
check is skipped and the caller says so: install ``mtk[train]`` to get it.

Its verdict is cached per model/parallel/train and versions (:mod:`mtk.launcher.megatron_cache`), so a repeated
``validate``/``launch`` of the same model pays for the import once; the CLI says which happened.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mtk.spec import Job

# Refusals whose text names no argument: (pattern, field). Checked before the argument names.
_KNOWN: tuple[tuple[str, str], ...] = (
    (r"Bias in Mo[Ee]", "model.add_bias_linear"),
    (r"capacity_factor|drop_policy", "model.moe.capacity_factor"),
)
# Fixes appended to megatron-core's message, by field.
FIXES: dict[str, str] = {
    "model.add_bias_linear": "set model.add_bias_linear: false (experts are tensor-parallel at parallel.tp > 1, "
                             "which megatron-core allows only without bias) or parallel.tp: 1",
    "model.ffn_hidden_size": "pick an FFN size divisible by parallel.tp",
    "model.moe.ffn_hidden_size": "pick an expert FFN size divisible by parallel.tp",
    "model.hidden_size": "pick a hidden size divisible by parallel.tp and num_attention_heads",
}
_SPEC_FIELD = re.compile(r"^((?:model|parallel|train|cluster|data)\.[a-z_.]+)")


# What the child process costs, said whenever it runs.
WHAT_IT_RUNS = "a child process imports torch + megatron.core and builds the model on the meta device"


@dataclass
class MegatronVerdict:
    """What megatron-core said about a job: problems (field, message) and, when the model built, its size.
    ``cached``: the verdict came from the cache (no child ran); ``seconds``: how long the child took (for a cache
    hit, the run that produced the entry); ``cache_note``: why a fresh verdict was not cached."""

    ran: bool
    problems: list[tuple[str, str]] = field(default_factory=list)
    parameters_per_rank: int | None = None
    note: str = ""
    cached: bool = False
    seconds: float | None = None
    cache_note: str = ""

    def origin(self) -> str:
        """One line: whether the check ran now (and its cost) or its verdict came from the cache."""
        if not self.ran or self.seconds is None:
            return ""
        if self.cached:
            return ("megatron-core check: verdict from the cache (same model/parallel/train and versions; "
                    f"it took {self.seconds:.1f} s when it ran; --megatron-recheck runs it again)")
        return (f"megatron-core check: ran in {self.seconds:.1f} s ({WHAT_IT_RUNS}); "
                + (self.cache_note or "verdict cached for this model/parallel/train"))


def available() -> bool:
    return importlib.util.find_spec("torch") is not None and importlib.util.find_spec("megatron") is not None


def field_of(message: str, default: str = "model", job: Job | None = None) -> str:
    """The spec field a megatron-core message is about: a spec path it starts with, a known message, the first
    megatron argument it names (the flag table's reverse map, :func:`mtk.megatron_flags.names_to_fields`), or the
    spec size a bare "N is not divisible by M" is about."""
    from mtk.megatron_flags import names_to_fields

    m = _SPEC_FIELD.match(message)
    if m:
        return m.group(1).rstrip(".")
    for pattern, name in _KNOWN:
        if re.search(pattern, message):
            return name
    fields = names_to_fields(job)
    hits = [(pos, name) for name in fields if (pos := _find_word(message, name)) >= 0]
    if hits:
        return fields[min(hits)[1]]
    bare = re.search(r"(\d+) is not divisible by (\d+)", message)
    if bare and job is not None:
        return _field_with_value(job, int(bare.group(1))) or default
    return default


def _field_with_value(job: Job, value: int) -> str | None:
    m = job.model
    sizes = {"model.moe.ffn_hidden_size": m.moe.ffn_hidden_size if m.moe.num_experts else None,
             "model.ffn_hidden_size": m.ffn, "model.hidden_size": m.hidden_size,
             "model.num_attention_heads": m.num_attention_heads, "model.num_query_groups": m.query_groups,
             "model.vocab_size": m.vocab_size, "model.num_layers": m.num_layers}
    return next((name for name, size in sizes.items() if size == value), None)


def _find_word(text: str, word: str) -> int:
    m = re.search(rf"(?<![A-Za-z_]){re.escape(word)}(?![A-Za-z_])", text)
    return m.start() if m else -1


def check(job: Job, timeout: float = 300, recheck: bool = False) -> MegatronVerdict:
    """Ask megatron-core (in a child process) whether it would build this job's model, or take the verdict the
    cache holds for the same model/parallel/train and versions (``recheck``: run it anyway, refresh the entry).

    Verdicts with problems are cached too: the child is deterministic for its key (the same spec material and
    code give the same refusal), so re-validating an unchanged spec repeats the same error without the import.
    A check that could not run (a crash, a timeout, a broken install) is never cached."""
    if not available():
        return MegatronVerdict(False, note="megatron-core checks skipped: torch/megatron-core are not installed here "
                                   "(pip install 'mtk[train]' to have megatron-core check the model before submit)")
    from mtk.vocabulary import built

    from . import megatron_cache as cache

    vocab_size = built(job).size  # the tokenizer's, as the engine builds it: part of the key, handed to the child
    material = cache.key_material(job, cache.environment(), vocab_size)
    path = cache.entry_path(material)
    hit = None if recheck else cache.load(path, material)
    if hit is not None:
        return MegatronVerdict(True, [(name, msg) for name, msg in hit["problems"]], hit["parameters_per_rank"],
                       cached=True, seconds=hit["seconds"])
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mtk.launcher.megatron_check", "--tokenizer-vocab", str(vocab_size)],
                          input=job.to_json(), capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        problems = [(str(name), str(msg)) for name, msg in out["problems"]]
    except (ValueError, IndexError, KeyError, TypeError):
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        return MegatronVerdict(False, note=f"megatron-core check could not run (exit {proc.returncode}):\n{tail}")
    result = {"problems": problems, "parameters_per_rank": out.get("parameters_per_rank")}
    cache_note = cache.store(path, material, result, seconds) or ""
    return MegatronVerdict(True, problems, result["parameters_per_rank"], seconds=seconds, cache_note=cache_note)


def enforce(job: Job, source: str | None = None, recheck: bool = False,
            say: Callable[[str], None] | None = None) -> MegatronVerdict:
    """Raise SpecError naming each field megatron-core refuses; return the verdict (sizes, skip note) otherwise.
    ``say`` gets the one line on where the verdict came from (ran now / cached), before any refusal."""
    from mtk.spec.errors import Problem, SpecError

    verdict = check(job, recheck=recheck)
    if say is not None and verdict.origin():
        say(verdict.origin())
    if verdict.problems:
        raise SpecError([Problem(name, message) for name, message in verdict.problems], source)
    return verdict


# --------------------------------------------------------------------------- the child process


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:400]


def _problem(job: Job, what: str, exc: BaseException) -> tuple[str, str]:
    text = _first_line(exc)
    name = field_of(text, job=job)
    fix = FIXES.get(name)
    return name, f"{what}: {text}" + (f"; {fix}" if fix else "")


def _uses_te(job: Job) -> bool:
    """Transformer Engine is there on GPU images (NGC bases) and never on CPU: decide by the job's device."""
    return job.cluster.device == "gpu"


def _check_plan(job: Job):
    """The device plan the check builds with: the job's device, megatron-core's local layers (TE is not here)."""
    from mtk.training import device_plan

    return device_plan.plan(job, gpu=job.cluster.device == "gpu", te=False)


def _config_problems(job: Job) -> tuple[object | None, list[tuple[str, str]]]:
    from mtk.training import loop, model

    cpu = job.cluster.device == "cpu"
    try:
        loop.preflight(job, cpu, _uses_te(job))
    except loop.EngineError as exc:
        return None, [(field_of(str(exc)), str(exc))]
    try:
        return model.transformer_config(job, _check_plan(job)), []
    except (AssertionError, ValueError, TypeError, NotImplementedError) as exc:
        return None, [_problem(job, "megatron-core refuses this model", exc)]


def _scheduler_problems(job: Job) -> list[tuple[str, str]]:
    import types

    from mtk.training import optim

    from mtk.megatron_flags import names_to_fields

    fake = types.SimpleNamespace(param_groups=[{"lr": 0.0, "weight_decay": 0.0, "params": []}])
    try:
        optim.build_scheduler(job, fake)
    except (AssertionError, ValueError) as exc:
        t = job.train
        detail = _first_line(exc) if str(exc).strip() else (
            f"lr_warmup_iters ({t.lr_warmup_iters}) must be below the decay horizon "
            f"(lr_decay_iters or iterations = {t.lr_decay_iters or t.iterations})")
        warmup = names_to_fields(job)["lr_warmup_steps"]  # lr_warmup_iters, or the fraction where the job sets it
        name = warmup if "warmup" in detail or not str(exc).strip() else field_of(detail, job=job)
        return [(name, f"megatron-core's LR scheduler refuses: {detail}")]
    return []


def _init_fake_world(job: Job) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from mtk import megatron_flags

    # torch's "fake" backend (no communication, one process plays rank 0 of the world): without a store,
    # init_process_group sets up the backend and its store itself.
    dist.init_process_group("fake", rank=0, world_size=job.cluster.world_size)
    # the layout's groups (the table's parallel rows); the fake world has no timeout to keep
    ps.initialize_model_parallel(**megatron_flags.core_kwargs(job, megatron_flags.GROUPS, sections=("parallel",)),
                                 create_gloo_process_groups=False)


def _model_problems(job: Job, config, vocab_size: int) -> tuple[int | None, list[tuple[str, str]]]:
    import torch
    from mtk.training import model

    try:
        _init_fake_world(job)
        config.perform_initialization = False
        with torch.device("meta"):
            chunks = model.build_model(job, config, vocab_size, _check_plan(job), on_device=False)
    except (AssertionError, ValueError, TypeError, RuntimeError, NotImplementedError) as exc:
        return None, [_problem(job, "megatron-core refuses to build the model", exc)]
    return sum(p.numel() for c in chunks for p in c.parameters()), []


def run_child(job_json: str, vocab_size: int) -> dict:
    """The check itself; ``vocab_size`` is the tokenizer's (:func:`mtk.vocabulary.built`, found by the parent), so the
    child reads no tokenizer file and its verdict depends only on what the cache key holds."""
    from mtk.training import compat

    from mtk.spec.job import Job

    job = Job.model_validate_json(job_json)
    compat.install_import_stubs()
    if not compat.cuda_available():
        compat.install()  # megatron-core's CUDA-only calls at build time (streams, current_device) on this host
    problems = _scheduler_problems(job)
    config, config_problems = _config_problems(job)
    problems += config_problems
    params = None
    if config is not None:
        params, model_problems = _model_problems(job, config, vocab_size)
        problems += model_problems
    return {"problems": problems, "parameters_per_rank": params}


def main(argv: list[str] | None = None) -> None:
    import argparse
    import contextlib
    import io
    import os
    import warnings

    parser = argparse.ArgumentParser(prog="python -m mtk.launcher.megatron_check")
    parser.add_argument("--tokenizer-vocab", type=int, required=True, help="the tokenizer's vocabulary (unpadded)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    noise = io.StringIO()
    with contextlib.redirect_stdout(noise):
        result = run_child(sys.stdin.read(), args.tokenizer_vocab)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

