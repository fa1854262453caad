"""The launcher around pretrain_gpt.py gives the cluster: torchrun's (or ``python -m torch.distributed.run``'s)
``--nproc_per_node``/``--nnodes``, srun's and ``#SBATCH``'s node counts and the cluster.slurm fields; other launcher
options are listed (mtk renders its own launcher)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from ..bash_reader import Value, known
from ..bash_reader.values import Chunk
from .flags import Imported

NPROC = ("--nproc_per_node", "--nproc-per-node")
NNODES = ("--nnodes",)
# sbatch/srun options with a cluster.slurm field
SLURM_FIELDS = {"-p": "partition", "--partition": "partition", "-A": "account", "--account": "account", "--qos": "qos",
                "-t": "time", "--time": "time", "--exclusive": "exclusive", "--mem": "mem",
                "--container-image": "container_image", "--container-mounts": "container_mounts",
                "--container-workdir": "container_workdir", "--auto-resume": "hyperpod_auto_resume"}
LAUNCHERS = ("srun", "torchrun", "mpirun")


def read_cluster(launcher: tuple[Value, ...], sbatch: tuple[str, ...], exports: dict[str, Value],
                 out: Imported) -> int | None:
    """Sets ``out.spec["cluster"]``; returns the world size when the script says it (nodes × processes)."""
    cluster: dict[str, Any] = {"device": "gpu"}
    options = _options(list(launcher))
    for opt, value in _sbatch_options(list(sbatch)):
        options.setdefault(("#SBATCH", opt), value)
    nodes = procs = None
    slurm: dict[str, Any] = {}
    for (where, opt), value in options.items():
        field_ = SLURM_FIELDS.get(opt) if where in ("srun", "#SBATCH") else None
        if field_ and (value is None or value.known):
            if field_ == "exclusive":
                slurm["exclusive"] = True
            elif field_ == "hyperpod_auto_resume":  # HyperPod's srun --auto-resume=1
                slurm[field_] = value is not None and value.text == "1"
            elif field_ == "container_mounts" and value is not None:
                slurm["container_mounts"] = value.text.split(",")
            elif value is not None:
                slurm[field_] = value.text
            continue
        target = None
        if opt in NPROC:
            target = "procs_per_node"
        elif opt in NNODES or (where in ("srun", "#SBATCH") and opt in ("-N", "--nodes")):
            target = "nodes"
        elif where in ("srun", "#SBATCH") and opt in ("--ntasks-per-node", "--gpus-per-node"):
            target = "procs_per_node"
        if target is None or value is None:
            if opt not in ("-J", "--job-name"):
                out.ignored.append((f"{where} {opt}", "a launcher option: mtk renders its own launcher "
                                                      "(cluster.*, cluster.slurm.*)"))
            continue
        if not value.known:
            out.ignored.append((f"{where} {opt}", f"{value.text!r} is not known from the script "
                                                  f"({'; '.join(value.unknown)})"))
            continue
        if not re.fullmatch(r"\d+", value.text):
            out.ignored.append((f"{where} {opt}", f"{value.text!r} is not a count mtk reads"))
            continue
        if target == "nodes" and nodes is None:
            nodes = int(value.text)
        elif target == "procs_per_node" and procs is None:
            procs = int(value.text)
    if nodes is not None:
        cluster["nodes"] = nodes
    if procs is not None:
        cluster["procs_per_node"] = procs
    if slurm or sbatch or any(w.text == "srun" for w in launcher):
        slurm.setdefault("runtime", "pyxis" if any(o == "--container-image" for _, o in options) else "bare")
        cluster["slurm"] = slurm
    if exports:
        out.notes.append("environment exported by the script, not imported (mtk sets its own; cluster.env adds "
                         f"more): {', '.join(exports)}")
    out.spec["cluster"] = {**cluster, **out.spec.get("cluster", {})}  # with what the flags set (pg_timeout_s)
    single = not any(w.text in ("srun", "mpirun") for w in launcher) and not sbatch
    if procs is not None and (nodes is not None or single):
        return procs * (nodes or 1)
    return None


def _options(words: list[Value]) -> dict[tuple[str, str], Value | None]:
    """Launcher options by (launcher, option): srun's before the program, torchrun's after torchrun."""
    out: dict[tuple[str, str], Value | None] = {}
    where = ""
    i = 0
    while i < len(words):
        text = words[i].text
        base = text.rsplit("/", 1)[-1]
        if base in LAUNCHERS:
            where = base
        elif base in ("python", "python3") or re.fullmatch(r"python3(\.\d+)?", base):
            where = "python"
        elif where == "python":  # python's own options; -m torch.distributed.run is torchrun
            if text == "-m" and i + 1 < len(words):
                i += 1
                if words[i].text in ("torch.distributed.run", "torch.distributed.launch"):
                    where = "torchrun"
        elif text.startswith("-") and where:
            opt, eq, value = text.partition("=")
            if eq:
                word = words[i]
                head = word.chunks[0].text.partition("=")[2]
                out[(where, opt)] = known(value, word.line) if word.known else \
                    Value((Chunk(head), *word.chunks[1:]), word.assumed, word.line)
            elif i + 1 < len(words) and not words[i + 1].text.startswith("-") and \
                    words[i + 1].text.rsplit("/", 1)[-1] not in ("python", "python3", "torchrun"):
                out[(where, opt)] = words[i + 1]
                i += 1
            else:
                out[(where, opt)] = None
        i += 1
    return out


def _sbatch_options(lines: list[str]) -> list[tuple[str, Value | None]]:
    out: list[tuple[str, Value | None]] = []
    for line in lines:
        try:
            parts = shlex.split(line, comments=True)
        except ValueError:
            continue
        for part in parts:
            opt, eq, value = part.partition("=")
            out.append((opt, known(value) if eq else None))
    return out


def job_name(sbatch: tuple[str, ...]) -> str | None:
    name = None
    for opt, value in _sbatch_options(list(sbatch)):
        if opt in ("-J", "--job-name") and value is not None:
            name = value.text
    return name
