"""The ``#SBATCH`` header: options mtk sets from the spec, and validation of ``cluster.slurm.extra_sbatch``."""

from __future__ import annotations

import difflib
import re

from .quoting import directive_value

# Options mtk derives from the spec; extra_sbatch may not set them (the field to change instead).
MANAGED: dict[str, str] = {
    "job-name": "name", "nodes": "cluster.nodes", "ntasks": "cluster.nodes",
    "ntasks-per-node": "cluster.nodes (mtk runs one task per node)", "gpus-per-node": "cluster.slurm.gpu_request",
    "gpus": "cluster.slurm.gpu_request", "cpus-per-task": "cluster.slurm.cpus_per_task",
    "time": "cluster.slurm.time", "partition": "cluster.slurm.partition", "account": "cluster.slurm.account",
    "qos": "cluster.slurm.qos", "exclusive": "cluster.slurm.exclusive", "mem": "cluster.slurm.mem",
    "output": "cluster.runs_dir", "error": "cluster.runs_dir", "open-mode": "cluster.runs_dir",
    "signal": "cluster.slurm.signal_lead", "requeue": "cluster.slurm.requeue",
    "no-requeue": "cluster.slurm.requeue", "dependency": "cluster.slurm.singleton",
    "array": "(arrays are not supported)", "wrap": "(mtk writes the script)", "parsable": "(mtk submits)",
    "chdir": "(jobs run in the directory mtk launch ran in)", "export": "cluster.env",
    "wait-all-nodes": "(mtk sets --wait-all-nodes=1 on training: no step starts before every node has booted)",
}

# Other sbatch long options (Slurm 22.05) a user may pass through extra_sbatch.
PASSTHROUGH = frozenset({
    "acctg-freq", "batch", "bb", "bbf", "begin", "cluster-constraint", "clusters", "comment", "constraint",
    "container", "contiguous", "core-spec", "cores-per-socket", "cpu-freq", "cpus-per-gpu", "deadline",
    "delay-boot", "distribution", "exclude", "extra-node-info", "get-user-env", "gid", "gpu-bind",
    "gpu-freq", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "hint", "hold",
    "kill-on-invalid-dep", "licenses", "mail-type", "mail-user", "mcs-label", "mem-bind", "mem-per-cpu",
    "mem-per-gpu", "mincpus", "network", "nice", "no-kill", "nodefile", "nodelist", "ntasks-per-core",
    "ntasks-per-gpu", "ntasks-per-socket", "overcommit", "oversubscribe", "power", "priority", "profile",
    "propagate", "reboot", "reservation", "sockets-per-node", "spread-job", "switches", "thread-spec",
    "threads-per-core", "time-min", "tmp", "use-min-nodes", "wckey",
})

_KEY = re.compile(r"^[a-z][a-z0-9-]*$")


def check_extra(extra: dict[str, str]) -> list[tuple[str, str, str]]:
    """Problems with extra_sbatch as (field, message, value)."""
    out = []
    for key in sorted(extra):
        field = f"cluster.slurm.extra_sbatch.{key}"
        bare = key.removeprefix("--")
        if not _KEY.match(bare):
            out.append((field, "not an sbatch option name: use the long name without '--', e.g. constraint", key))
        elif bare in MANAGED:
            out.append((field, f"mtk sets --{bare} itself; change {MANAGED[bare]} instead", key))
        elif bare not in PASSTHROUGH:
            close = difflib.get_close_matches(bare, sorted(PASSTHROUGH), n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'? " if close else ""
            out.append((field, f"not an sbatch option; {hint}see `sbatch --help` for the long option names", key))
    return out


def directive(key: str, value: str | None = None, field: str = "") -> str:
    """One ``#SBATCH --key[=value]`` line; the value quoted for sbatch's own parser."""
    if value is None or value == "":
        return f"#SBATCH --{key}"
    return f"#SBATCH --{key}={directive_value(value, field)}"
