"""``cluster.slurm``: the Slurm backend's own block (partition, wall time, Pyxis or a bare venv, requeue, ...).

Registered in ``mtk.backends.OPTIONS`` and validated by the spec as ``cluster.slurm``: the neutral core never
names these fields. A light module (pydantic only): every spec load imports it.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from mtk.spec.base import Section

# preprocess's CPUs when data.corpus.workers is not set: a share of a node a GPU or CPU node can give, enough
# workers to keep tokenizing ahead of a download; raise it (or set the workers) for large corpora.
DATA_CPUS = 8
_SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$|^\d+$")


class SlurmDataOptions(Section):
    """The data steps (getdata, preprocess): CPU work that must not hold a GPU node, nor the train step's wall time.

    Defaults share a node (no --exclusive, a few CPUs, the partition's default memory per CPU): on a GPU partition
    a data step takes a slice of one node for as long as it runs, never the node."""

    partition: str | None = Field(
        None, description="Partition of the data steps, e.g. a CPU queue (default: cluster.slurm.partition).")
    time: str | None = Field(None, description="Their wall-clock limit (default: cluster.slurm.time).")
    cpus_per_task: int | None = Field(
        None, ge=1, description="CPUs of the one data task. Default: preprocess asks for data.corpus.workers, else "
        f"{DATA_CPUS}; getdata (downloads wait on the network) for 1.")
    mem: str | None = Field(None, description="Memory of the data task's node share, e.g. '32G' (default: the "
                                              "partition's memory per CPU; never cluster.slurm.mem, which is often "
                                              "'0': the whole node).")
    exclusive: bool = Field(False, description="Whole nodes for the data steps (then preprocess without "
                                               "data.corpus.workers runs one worker per CPU of the node).")

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, v: str | None) -> str | None:
        if v is not None and not _SLURM_TIME.match(v):
            raise ValueError("time must look like '90', '01:30:00' or '1-00:00:00'")
        return v


class SlurmOptions(Section):
    """sbatch options and how each node gets its software (``bare`` env or ``pyxis`` container)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = Field("01:00:00", description="Wall-clock limit: MM, HH:MM:SS or D-HH:MM:SS.")
    exclusive: bool = Field(True, description="Whole nodes for training (GPU jobs); set false to share CPU nodes. "
                                              "The data steps have their own: data.exclusive.")
    cpus_per_task: int | None = Field(None, ge=1, description="CPUs for the one training task per node.")
    mem: str | None = Field(None, description="Memory per training node, e.g. '0' (all) or '200G'.")
    data: SlurmDataOptions = Field(default_factory=SlurmDataOptions,
                                   description="Partition, time, CPUs, memory and exclusivity of getdata and "
                                               "preprocess.")
    runtime: Literal["bare", "pyxis"] = Field(
        "pyxis", description="bare: activate venv/conda per node; pyxis: container."
    )
    venv: str | None = Field(None, description="bare: path of a virtualenv to activate on every node.")
    conda_env: str | None = Field(None, description="bare: conda environment name or path.")
    container_image: str | None = Field(None, description="pyxis: .sqsh path or image reference (default: image.sqsh).")
    container_mounts: list[str] = Field(
        default_factory=list, description="pyxis: SRC:DST mounts (data dir and run dir are added)."
    )
    container_workdir: str | None = None
    requeue: bool = Field(True, description="Requeue after a signal-triggered save or a node failure.")
    signal_lead: int = Field(
        600, ge=0, le=65535, description="Seconds before the time limit to send SIGUSR2 (save and exit); 0 disables "
        "(Slurm's --signal takes at most 65535)."
    )
    singleton: bool = Field(False, description="Keep one successor queued (--dependency=singleton) to pick up crashes.")
    max_failures: int = Field(
        3, ge=1, description="Guardrail: stop requeueing after N failures without checkpoint progress."
    )
    rdzv_port: int | None = Field(None, ge=1024, le=65535,
                                  description="The rendezvous store's port (default: from the job id).")
    gpu_request: Literal["auto", "gres", "none"] = Field(
        "auto", description="GPU jobs: how training asks Slurm for GPUs. gres: '#SBATCH --gpus-per-node' (clusters "
        "with GPU GRES, e.g. ParallelCluster); none: never (HyperPod without GRES rejects --gpus; --exclusive whole "
        "nodes see every GPU); auto: mtk launch asks `sinfo -o %G` and adds --gpus-per-node only where the "
        "partition's nodes have gpu GRES.")
    hyperpod_auto_resume: bool = Field(
        True, description="On a SageMaker HyperPod node (/opt/sagemaker_cluster exists) run training under "
        "`srun --auto-resume=1`: HyperPod replaces a faulty node and restarts the step in place.")
    extra_sbatch: dict[str, str] = Field(
        default_factory=dict, description="More #SBATCH options, e.g. {constraint: a100}."
    )

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, v: str) -> str:
        if not _SLURM_TIME.match(v):
            raise ValueError("time must look like '90', '01:30:00' or '1-00:00:00'")
        return v
