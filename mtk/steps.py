"""The steps of a run and the states a step is in: one home for the names every backend, run record and rendered
file uses.

``Step`` names what ``mtk-entrypoint`` runs, and is its registry: each member carries the module whose
``main(argv)`` runs it, the line ``mtk-entrypoint --help`` shows, and whether it initialises CUDA (checked for
CUDA forward compatibility first). A new entrypoint step is one module plus one line here. The modules are
named, never imported: the entrypoint loads only the step it runs (a login node never imports torch).

Both enums are ``StrEnum``: a member *is* its string (``Step.TRAIN == "train"``, ``f"{StepState.FAILED}"`` is
``FAILED``), so run records, rendered files and JSON keep the same bytes, and code that still compares against
the bare string agrees. Imports nothing above the core.
"""

from __future__ import annotations

import enum


class Step(enum.StrEnum):
    """A step ``mtk-entrypoint`` runs. The first three are the pipeline a run is made of (:data:`PIPELINE`),
    each its own scheduled job; the others run inside a node's training step or by hand."""

    module: str  # the module whose main(argv) runs the step
    summary: str  # its line in `mtk-entrypoint --help`
    cuda: bool  # initialises CUDA (or starts what does)

    def __new__(cls, value: str, module: str, summary: str, cuda: bool = False) -> Step:
        member = str.__new__(cls, value)
        member._value_ = value
        member.module, member.summary, member.cuda = module, summary, cuda
        return member

    GETDATA = "getdata", "mtk.data_jobs.getdata", "fetch corpus and tokenizer files into the shared data dir"
    PREPROCESS = "preprocess", "mtk.data_jobs.preprocess_cli", "tokenize JSONL into Megatron .bin/.idx"
    TRAIN = ("train", "mtk.launcher.train_step", "start torchrun for this node with rendezvous from the environment",
             True)
    WORKER = "worker", "mtk.training.worker", "one training rank (started by torchrun)", True
    DOCTOR = "doctor", "mtk.containers.doctor", "check torch, CUDA, NCCL, EFA and megatron.core on this node", True
    PREFLIGHT = ("preflight", "mtk.launcher.preflight",
                 "health gate: doctor, storage, GPU/EFA counts, all-reduce across nodes", True)


# The pipeline, in the order its steps run (``Job.steps()`` picks those a spec needs); the data steps come first.
PIPELINE: tuple[Step, ...] = (Step.GETDATA, Step.PREPROCESS, Step.TRAIN)
DATA_STEPS: tuple[Step, ...] = (Step.GETDATA, Step.PREPROCESS)


class StepState(enum.StrEnum):
    """The neutral state of one step (``StepStatus.state``), each backend's scheduler states mapped onto it."""

    PENDING = "PENDING"  # queued, waiting for resources or for the step before it
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    STOPPED = "STOPPED"  # ended by `mtk stop`: checkpoint saved, launching again resumes
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"  # the scheduler no longer knows it, or gave a state nothing maps
