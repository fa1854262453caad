"""Environment variables a job may not set: the launcher, torchrun or Slurm own them.

``cluster.env`` (and ``cluster.secrets``, which become variables too) is exported into every process after
mtk's own settings, so a key listed here would silently replace what the rendezvous derived — every node would
claim ``RANK=0``, or all would dial the ``MASTER_ADDR`` typed into a spec instead of the allocation's first host.
Such a key is refused before any cluster time, naming the key and its owner. The groups, and why:

* torchrun's rank identity and rendezvous (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``GROUP_RANK``, ``GROUP_WORLD_SIZE``, ``ROLE_*``, ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_*``): the
  agent sets them per worker from the rendezvous; the size of the job is ``cluster.nodes`` ×
  ``cluster.procs_per_node``, the port ``cluster.<backend>.rdzv_port``.
* ``PET_*``: torchrun reads every ``PET_<FLAG>`` as its ``--<flag>`` and the Kubeflow operator injects them per
  pod; a spec value would override the node rank, node count or rendezvous endpoint mtk passes.
* Slurm's ``SLURM_*`` (set per job and step: node list, node id, job id, which mtk reads to find the
  rendezvous host and to resume) and ``SBATCH_*``/``SRUN_*``/``SALLOC_*`` (read by those commands as options, so
  they would change the allocation behind the rendered script's back; use ``cluster.slurm.extra_sbatch``).
* ``MTK_*`` except ``MTK_DEBUG``: mtk's run scripts set these per node to coordinate steps (run dir, step,
  node list, exit codes); ``MTK_DEBUG`` (tracebacks on errors) is the one meant for users.

Deliberately allowed: ``CUDA_VISIBLE_DEVICES`` (choosing GPUs on a shared machine is legitimate; neither
torchrun nor mtk sets it), ``OMP_NUM_THREADS`` (torchrun only defaults it), ``NCCL_*``/``FI_*`` (presets the
spec is meant to override).
"""

from __future__ import annotations

from .errors import Problem

_EXACT = {
    "RANK": "torchrun", "WORLD_SIZE": "torchrun", "LOCAL_RANK": "torchrun", "LOCAL_WORLD_SIZE": "torchrun",
    "GROUP_RANK": "torchrun", "GROUP_WORLD_SIZE": "torchrun", "ROLE_RANK": "torchrun",
    "ROLE_WORLD_SIZE": "torchrun", "ROLE_NAME": "torchrun", "MASTER_ADDR": "torchrun", "MASTER_PORT": "torchrun",
}
_PREFIXES = (
    ("TORCHELASTIC_", "torchrun"),
    ("PET_", "torchrun (and the Kubeflow operator)"),
    ("SLURM_", "Slurm"),
    ("SBATCH_", "Slurm (sbatch reads it as an option)"),
    ("SRUN_", "Slurm (srun reads it as an option)"),
    ("SALLOC_", "Slurm (salloc reads it as an option)"),
    ("MTK_", "mtk's run scripts"),
)
_ALLOWED = {"MTK_DEBUG"}
_FIX = {
    "torchrun": "mtk derives it from cluster.nodes, cluster.procs_per_node and the rendezvous; the port is "
                "cluster.<backend>.rdzv_port",
    "Slurm": "set Slurm options with cluster.slurm fields or cluster.slurm.extra_sbatch",
    "mtk's run scripts": "only MTK_DEBUG is meant to be set by a spec",
}


def owner(name: str) -> str | None:
    """Who sets ``name`` for every process (torchrun, Slurm, mtk), or None when a job may set it."""
    if name in _ALLOWED:
        return None
    if name in _EXACT:
        return _EXACT[name]
    return next((who for prefix, who in _PREFIXES if name.startswith(prefix)), None)


def reserved_env_problems(env_names: list[str], secret_names: list[str]) -> list[Problem]:
    """One problem per ``cluster.env`` key or ``cluster.secrets`` name that torchrun, Slurm or mtk own."""
    out = []
    fields = [(f"cluster.env.{n}", n) for n in env_names] + [(f"cluster.secrets.{i}.name", n)
                                                             for i, n in enumerate(secret_names)]
    for field, name in fields:
        who = owner(name)
        if who is None:
            continue
        fix = _FIX.get(who.split(" (")[0], "")
        fix = f": {fix}" if fix else ""
        out.append(Problem(field, f"{name} is set for every process by {who}; a value here would replace it "
                           f"and break the rendezvous or the run's bookkeeping. Remove it{fix}"))
    return out
