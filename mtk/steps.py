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
    """A step ``mtk-entrypoint`` runs. Those with a ``needed_when`` are the pipeline a run is made of
    (:data:`PIPELINE`, in the order written here), each its own scheduled job; the others run inside a node's
    training step or by hand."""

    module: str  # the module whose main(argv) runs the step
    summary: str  # its line in `mtk-entrypoint --help`
    cuda: bool  # initialises CUDA (or starts what does)
    # A pipeline step's switch: the spec field (dotted) whose value, set, makes a launch schedule it ("": always);
    # None: not a pipeline step.
    needed_when: str | None

    def __new__(cls, value: str, module: str, summary: str, cuda: bool = False,
                needed_when: str | None = None) -> Step:
        member = str.__new__(cls, value)
        member._value_ = value
        member.module, member.summary, member.cuda, member.needed_when = module, summary, cuda, needed_when
        return member

    def needed_by(self, job: object) -> bool:
        """Whether a launch of ``job`` schedules this step: a pipeline step whose switch field is set."""
        if self.needed_when is None:
            return False
        value = job
        for part in filter(None, self.needed_when.split(".")):
            value = getattr(value, part)
        return bool(value) if isinstance(value, (list, dict, str, bool)) else value is not None

    GETDATA = ("getdata", "mtk.data_jobs.getdata", "fetch corpus and tokenizer files into the shared data dir", False,
               "data.fetch")
    PREPROCESS = ("preprocess", "mtk.data_jobs.preprocess_cli", "tokenize JSONL into Megatron .bin/.idx", False,
                  "data.corpus")
    TRAIN = ("train", "mtk.launcher.train_step", "start torchrun for this node with rendezvous from the environment",
             True, "")
    WORKER = "worker", "mtk.training.worker", "one training rank (started by torchrun)", True
    DOCTOR = "doctor", "mtk.containers.doctor", "check torch, CUDA, NCCL, EFA and megatron.core on this node", True
    PREFLIGHT = ("preflight", "mtk.launcher.preflight",
                 "health gate: doctor, storage, GPU/EFA counts, all-reduce across nodes", True)


# The pipeline, in the order its steps run (``Job.steps()`` picks those a spec needs); the data steps come first,
# each a job of its own on every backend (a Slurm batch job, a Kubernetes Job, a local command), then training.
PIPELINE: tuple[Step, ...] = tuple(step for step in Step if step.needed_when is not None)
DATA_STEPS: tuple[Step, ...] = tuple(step for step in PIPELINE if step is not Step.TRAIN)


class StepState(enum.StrEnum):
    """The neutral state of one step (``StepStatus.state``), each backend's scheduler states mapped onto it."""

    PENDING = "PENDING"  # queued, waiting for resources or for the step before it
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    STOPPED = "STOPPED"  # ended by `mtk stop`: checkpoint saved, launching again resumes
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"  # the scheduler no longer knows it, or gave a state nothing maps
