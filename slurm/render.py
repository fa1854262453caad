"""Turn a Job into sbatch files and the exact submit commands. Pure: no subprocess, no I/O, same bytes
for the same (job, run dir).

Each sbatch file has three parts: the ``#SBATCH`` header (quoted for sbatch's own parser), a block of
shell assignments (every value through :func:`mtk.slurm.quoting.sh`), and the step logic from
``templates/step.sh.j2``, which interpolates no values at all: six flags pick its blocks, rendered by
:mod:`mtk.flag_template` (the Jinja subset it uses, without importing Jinja2 on every launch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from mtk import exitcodes, run_layout
from mtk.backends import Artifacts
from mtk.checkpoint_paths import checkpoint_dir as _checkpoint_dir
from mtk.flag_template import render_flags
from mtk.netenv import network_env
from mtk.spec.errors import Problem, SpecError
from mtk.steps import PIPELINE, Step

from .directives import check_extra, directive
from .options import DATA_CPUS
from .quoting import QuotingError, sh

if TYPE_CHECKING:
    from mtk.spec import Job

SCRIPTS = {step: f"{step}.sbatch" for step in PIPELINE}  # getdata.sbatch, preprocess.sbatch, train.sbatch
# After the first node's task ends, srun gives the others this long before killing them: a crashed node
# must not leave its peers blocked in a collective until the time limit.
SRUN_WAIT_SECONDS = 60
# SageMaker HyperPod marks its Slurm nodes with this directory; AWS's own sbatch files add `srun --auto-resume=1`
# when it exists (aws-samples/awsome-distributed-training 3.test_cases/megatron/megatron-lm/slurm/gpt3/
# 2.distributed-training.sbatch). The batch script tests for it on the node at run time.
HYPERPOD_MARKER = "/opt/sagemaker_cluster"


@dataclass(frozen=True)
class Submission:
    """One sbatch call of the chain."""

    step: Step
    script: str  # absolute path of the sbatch file
    job_name: str
    after: Step | None  # the step this one waits for (afterok)


def job_base(run_dir: str) -> str:
    """Job names start with the run dir's name: unique per run, so ``--dependency=singleton`` and
    ``scancel --name`` never touch another run."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", PurePosixPath(run_dir).name).strip("-") or "mtk"


def plan(job: Job, run_dir: str) -> list[Submission]:
    steps = job.steps()
    base = job_base(run_dir)
    return [Submission(step, f"{run_dir}/{SCRIPTS[step]}", f"{base}-{step}", steps[i - 1] if i else None)
            for i, step in enumerate(steps)]


def submit_argv(sub: Submission, after_id: str | None, secrets: bool = False) -> list[str]:
    """``sbatch --parsable [--dependency=afterok:ID --kill-on-invalid-dep=yes] FILE``: a failed step
    cancels the steps behind it instead of leaving them pending forever. With ``cluster.secrets``,
    ``--export=ALL`` makes sure the submitting environment (which holds them) reaches the job even where
    SBATCH_EXPORT says otherwise: the values travel with the job, never through a file or an argv."""
    argv = ["sbatch", "--parsable"]
    if secrets:
        argv.append("--export=ALL")
    if sub.after is not None:
        argv += [f"--dependency=afterok:{after_id}", "--kill-on-invalid-dep=yes"]
    return [*argv, sub.script]


def render(job: Job, run_dir: str) -> Artifacts:
    problems: list[Problem] = []
    if not run_dir.startswith("/"):
        problems.append(Problem("run dir", "must be an absolute path on storage every node sees", run_dir))
    if "%" in run_dir:
        problems.append(Problem("run dir", "contains '%', which Slurm expands in log file names (%j, %N, ...) "
                                "even when doubled; choose a runs_dir / --run-dir without '%'", run_dir))
    subs = plan(job, run_dir)
    files = {"job.json": job.to_json()}
    for sub in subs:
        try:
            files[SCRIPTS[sub.step]] = render_script(job, run_dir, sub)
        except SpecError as exc:
            problems += [p for p in exc.problems if p not in problems]
    if problems:
        raise SpecError(problems)
    commands = [submit_argv(sub, f"<job id of {sub.after}>" if sub.after else None, bool(job.cluster.secrets))
                for sub in subs]
    notes = [f"steps run in order ({' -> '.join(s.step for s in subs)}), each after the previous one succeeds",
             f"logs: {run_dir}/logs/<step>-<job id>.out (one line prefix per node: '0: ', '1: ', ...)"]
    if job.cluster.slurm.singleton:
        notes.append("the training job keeps one successor queued (--dependency=singleton)")
    if gpus_requested_at_submit(job, Step.TRAIN):
        notes.append(f"cluster.slurm.gpu_request auto: mtk launch adds --gpus-per-node={job.cluster.procs_per_node}"
                     " to the train sbatch only where `sinfo -o %G` shows gpu GRES on the partition")
    return Artifacts(backend="slurm", run_dir=run_dir, files=files, commands=commands, notes=notes,
                     modes={SCRIPTS[s.step]: 0o755 for s in subs})


def checkpoint_dir(job: Job, run_dir: str) -> str:
    return _checkpoint_dir(job.train.checkpoint.dir, run_dir)


def render_script(job: Job, run_dir: str, sub: Submission) -> str:
    problems: list[Problem] = []
    header = _header(job, run_dir, sub, problems)
    values = _values(job, run_dir, sub, problems)
    if problems:
        raise SpecError(problems)
    s = job.cluster.slurm
    logic = render_flags(__file__, "step.sh.j2", train=sub.step == Step.TRAIN, pyxis=s.runtime == "pyxis",
                         singleton=s.singleton, preflight=job.resilience.preflight.enabled,
                         spare=job.cluster.min_nodes is not None, sqsh=bool(_sqsh_path(job)))
    intro = [
        "#!/bin/bash",
        f"# {sub.step} step of mtk job '{job.name}'. Generated by `mtk render/launch --backend slurm`;",
        "# edit the job spec and render again rather than this file.",
    ]
    return "\n".join([*intro, *header, "", *values, ""]) + "\n" + logic


def preprocess_array(job: Job) -> str | None:
    """``--array`` of a sharded preprocess step: one task per shard, ``%`` throttled by max_parallel."""
    corpus = job.data.corpus
    if corpus is None or corpus.shards <= 1:
        return None
    return f"0-{corpus.shards - 1}%{corpus.max_parallel or corpus.shards}"


def step_cpus(job: Job, step: str) -> tuple[str | None, str]:
    """CPUs each task asks for, and the field that decided it; None: the whole node (--exclusive). Training:
    cluster.slurm.cpus_per_task. A data step shares a node unless cluster.slurm.data.exclusive: preprocess asks
    for what its workers use (data.corpus.workers), else cluster.slurm.data.cpus_per_task, else DATA_CPUS
    (getdata and any other data step: 1)."""
    s, d, corpus = job.cluster.slurm, job.cluster.slurm.data, job.data.corpus
    if step == Step.TRAIN:
        return (str(s.cpus_per_task), "cluster.slurm.cpus_per_task") if s.cpus_per_task else (None, "")
    if step == Step.PREPROCESS and corpus is not None and corpus.workers:
        return str(corpus.workers), "data.corpus.workers"
    if d.cpus_per_task:
        return str(d.cpus_per_task), "cluster.slurm.data.cpus_per_task"
    if d.exclusive:
        return None, ""
    return str(DATA_CPUS if step == Step.PREPROCESS else 1), "cluster.slurm.data.cpus_per_task"


def step_resources(job: Job, step: str) -> dict[str, tuple[str | None, str]]:
    """partition, time and mem of a step with the field each comes from: training's are cluster.slurm's, a data
    step's are cluster.slurm.data's (partition and time fall back to training's; mem never does)."""
    s, d = job.cluster.slurm, job.cluster.slurm.data
    if step == Step.TRAIN:
        return {"partition": (s.partition, "cluster.slurm.partition"), "time": (s.time, "cluster.slurm.time"),
                "mem": (s.mem, "cluster.slurm.mem")}
    return {"partition": (d.partition, "cluster.slurm.data.partition") if d.partition
            else (s.partition, "cluster.slurm.partition"),
            "time": (d.time, "cluster.slurm.data.time") if d.time else (s.time, "cluster.slurm.time"),
            "mem": (d.mem, "cluster.slurm.data.mem")}


def _header(job: Job, run_dir: str, sub: Submission, problems: list[Problem]) -> list[str]:
    c, s = job.cluster, job.cluster.slurm
    train = sub.step == Step.TRAIN
    array = preprocess_array(job) if sub.step == Step.PREPROCESS else None
    log = f"{run_dir}/{run_layout.LOGS_DIR}/{sub.step}-{'%A_%a' if array else '%j'}.out"
    wanted: list[tuple[str, str | None, str]] = [
        ("job-name", sub.job_name, "name"),
        ("nodes", (f"{c.min_nodes}-{c.nodes}" if c.min_nodes else str(c.nodes)) if train else "1", "cluster.nodes"),
    ]
    if not (train and c.min_nodes):  # with a range Slurm would size the job by its tasks: MIN nodes, no spares
        wanted.append(("ntasks-per-node", "1", "cluster.nodes"))
    if train and c.device == "gpu" and s.gpu_request == "gres":
        wanted.append(("gpus-per-node", str(c.procs_per_node), "cluster.procs_per_node"))
    if train:  # a step started on nodes still booting (power-saving, HyperPod replacements) fails at once
        wanted.append(("wait-all-nodes", "1", "cluster.nodes"))
    if array:
        wanted.append(("array", array, "data.corpus.shards"))
    cpus, cpus_field = step_cpus(job, sub.step)
    if cpus:
        wanted.append(("cpus-per-task", cpus, cpus_field))
    res = step_resources(job, sub.step)
    if res["mem"][0] is not None:
        wanted.append(("mem", *res["mem"]))
    wanted.append(("time", *res["time"]))
    if res["partition"][0] is not None:
        wanted.append(("partition", *res["partition"]))
    for key in ("account", "qos"):
        value = getattr(s, key)
        if value is not None:
            wanted.append((key, value, f"cluster.slurm.{key}"))
    exclusive, exclusive_field = ((s.exclusive, "cluster.slurm.exclusive") if train
                                  else (s.data.exclusive, "cluster.slurm.data.exclusive"))
    if exclusive:  # a data step asks for no CPU count only then (preprocess: one worker per CPU of the node)
        wanted.append(("exclusive", None, exclusive_field))
    if c.exclude_nodes:
        wanted.append(("exclude", ",".join(c.exclude_nodes), "cluster.exclude_nodes"))
    wanted += [("output", log, "run dir"), ("error", log, "run dir"), ("open-mode", "append", "run dir")]
    if train and s.signal_lead > 0:
        wanted.append(("signal", f"B:USR2@{s.signal_lead}", "cluster.slurm.signal_lead"))
    wanted.append(("requeue" if s.requeue else "no-requeue", None, "cluster.slurm.requeue"))
    problems += [Problem(f, m, v) for f, m, v in check_extra(s.extra_sbatch)]
    if not any(p.path.startswith("cluster.slurm.extra_sbatch") for p in problems):
        wanted += [(k.removeprefix("--"), v, f"cluster.slurm.extra_sbatch.{k}")
                   for k, v in sorted(s.extra_sbatch.items())]
    lines = []
    for key, value, field in wanted:
        try:
            lines.append(directive(key, value, field))
        except QuotingError as exc:
            problems.append(Problem(exc.field, str(exc), exc.value))
    return lines


def _values(job: Job, run_dir: str, sub: Submission, problems: list[Problem]) -> list[str]:
    s = job.cluster.slurm
    train = sub.step == Step.TRAIN
    assign: list[tuple[str, object, str]] = [
        ("MTK_STEP", sub.step, ""),
        ("MTK_RUN_DIR", run_dir, "run dir"),
        ("MTK_STATE_DIR", f"{run_dir}/{run_layout.STATE_DIR}", "run dir"),
    ]
    if s.runtime == "pyxis" or train:
        assign.append(("MTK_EXIT_USAGE", exitcodes.USAGE, ""))
    if train:
        assign += [
            ("MTK_EXIT_REQUEUE", exitcodes.REQUEUE, ""),
            ("MTK_EXIT_STOPPED", exitcodes.STOPPED, ""),
            ("MTK_EXIT_GUARDRAIL", exitcodes.GUARDRAIL, ""),
            ("MTK_EXIT_HANG", exitcodes.HANG, ""),
            ("MTK_EXIT_PREFLIGHT", exitcodes.PREFLIGHT, ""),
            ("MTK_NODES_WANTED", job.cluster.min_nodes or job.cluster.nodes, "cluster.nodes"),
            ("MTK_PARTITION", s.partition or "", "cluster.slurm.partition"),
            ("MTK_EXCLUDE_SPEC", ",".join(job.cluster.exclude_nodes), "cluster.exclude_nodes"),
            ("MTK_CKPT_DIR", checkpoint_dir(job, run_dir), "train.checkpoint.dir"),
            ("MTK_MAX_FAILURES", s.max_failures, ""),
            ("MTK_REQUEUE", s.requeue, ""),
            ("MTK_SINGLETON", s.singleton, ""),
            ("MTK_RDZV_PORT_FIXED", s.rdzv_port or "", ""),
            ("MTK_HYPERPOD_MARKER", HYPERPOD_MARKER if s.hyperpod_auto_resume else "",
             "cluster.slurm.hyperpod_auto_resume"),
        ]
    sqsh = _sqsh_path(job)
    if sqsh:
        assign.append(("MTK_SQSH", sqsh, "cluster.slurm.container_image" if s.container_image else "image.sqsh"))
    exports: list[tuple[str, object, str]] = [("MTK_RUN_DIR", run_dir, "run dir")]
    if s.venv and ":" in s.venv:
        problems.append(Problem("cluster.slurm.venv", "contains ':', which splits PATH when the venv is "
                                "activated; move the virtualenv to a path without ':'", s.venv))
    if s.venv:
        exports.append(("MTK_VENV", s.venv, "cluster.slurm.venv"))
    if s.conda_env:
        exports.append(("MTK_CONDA_ENV", s.conda_env, "cluster.slurm.conda_env"))
    if train and job.debug.nsys.enabled:
        exports.append(("MTK_NSYS_NODES", ",".join(map(str, _nsys_nodes(job, problems))), "debug.nsys.ranks"))
    if train:
        exports += [(k, v, f"cluster.env.{k}") for k, v in network_env(job, run_dir).items()]

    lines = ["# ---- Values from the job spec (each one shell-quoted). ----"]
    lines += [_assign(name, value, field, problems) for name, value, field in assign]
    lines += ["# Environment of every process on every node (NCCL/EFA presets, then cluster.env)."]
    lines += ["export " + _assign(name, value, field, problems) for name, value, field in exports]
    lines += _secret_check(job, problems)
    srun = _srun_args(job, run_dir, sub, problems)
    lines += ["# One task per node; `--label` prefixes every output line with the node's task number.",
              "# shellcheck disable=SC2054  # commas inside an element are part of the value",
              "MTK_SRUN_ARGS=(", *(f"  {_word(a, f, problems)}" for a, f in srun), ")"]
    if not step_cpus(job, sub.step)[0]:
        lines.append('MTK_SRUN_ARGS+=(--cpus-per-task="${SLURM_CPUS_ON_NODE:-1}")  # all CPUs of the node')
    lines += ["# Runs on each node: activate the environment there (the batch host's is not enough), then the step.",
              "# shellcheck disable=SC2016  # expanded on the node, not here",
              "MTK_NODE_SH='" + _node_script(job, sub) + "'"]
    return lines


def _sqsh_path(job: Job) -> str | None:
    """The squashfs file Pyxis will import, when the image is a file (not a registry reference)."""
    s = job.cluster.slurm
    if s.runtime != "pyxis":
        return None
    image = s.container_image or job.image.sqsh or ""
    return image if image.startswith("/") else None


def gpus_requested_at_submit(job: Job, step: str) -> bool:
    """Whether ``cluster.slurm.gpu_request: auto`` leaves the decision to ``mtk launch`` (sinfo at submit)."""
    return step == Step.TRAIN and job.cluster.device == "gpu" and job.cluster.slurm.gpu_request == "auto"


def _secret_check(job: Job, problems: list[Problem]) -> list[str]:
    """Names only: each referenced secret must have reached the batch host from the submitting environment."""
    names = job.cluster.secret_names
    if not names:
        return []
    return ["# Secrets by reference (cluster.secrets): the values come from the submitting environment.",
            "for mtk_secret in " + " ".join(_word(n, "cluster.secrets", problems) for n in names) + "; do",
            '  if [ -z "${!mtk_secret:-}" ]; then',
            '    echo "mtk: error: $mtk_secret (cluster.secrets) is not set in this job: export it in the shell'
            ' that runs mtk launch, and do not set SBATCH_EXPORT/--export to exclude it" >&2',
            "    exit 2",
            "  fi",
            "done"]


def _assign(name: str, value: object, field: str, problems: list[Problem]) -> str:
    return f"{name}={_word(value, field, problems)}"


def _word(value: object, field: str, problems: list[Problem]) -> str:
    try:
        return sh(value)
    except QuotingError as exc:
        problems.append(Problem(field or "value", str(exc), str(value)))
        return "''"


def _srun_args(job: Job, run_dir: str, sub: Submission, problems: list[Problem]) -> list[tuple[str, str]]:
    c, s = job.cluster, job.cluster.slurm
    if sub.step == Step.TRAIN:
        # With spare nodes the node count (and list) of each step is decided by the script at run time.
        nodes = [] if c.min_nodes else [(f"--nodes={c.nodes}", "")]
        args = [("--label", ""), *nodes, ("--ntasks-per-node=1", ""), (f"--wait={SRUN_WAIT_SECONDS}", "")]
    else:
        args = [("--label", ""), ("--nodes=1", ""), ("--ntasks=1", "")]
    cpus, cpus_field = step_cpus(job, sub.step)
    if cpus:
        args.append((f"--cpus-per-task={cpus}", cpus_field))
    if s.runtime == "pyxis":
        args += _pyxis_args(job, run_dir, problems)
    return args


def _pyxis_args(job: Job, run_dir: str, problems: list[Problem]) -> list[tuple[str, str]]:
    s, d = job.cluster.slurm, job.data
    image_field = "cluster.slurm.container_image" if s.container_image else "image.sqsh"
    image = s.container_image or job.image.sqsh or ""
    if not d.dir.startswith("/"):
        problems.append(Problem("data.dir", "the pyxis runtime mounts it into the container at the same path, "
                                "so it must be absolute (e.g. /fsx/data)", d.dir))
    mounts: list[tuple[str, str]] = [(d.dir, "data.dir"), (run_dir, "run dir")]
    ckpt = checkpoint_dir(job, run_dir)
    if ckpt.startswith("/") and not ckpt.startswith(run_dir.rstrip("/") + "/"):
        mounts.append((ckpt, "train.checkpoint.dir"))
    if d.cache_dir and d.cache_dir.startswith("/"):
        mounts.append((d.cache_dir, "data.cache_dir"))
    specs: list[str] = []
    for path, field in mounts:
        if path.startswith("/") and ("," in path or ":" in path):
            problems.append(Problem(field, "Pyxis mount lists cannot carry ',' or ':' in a path; rename it", path))
        spec = f"{path}:{path}"
        if path.startswith("/") and spec not in specs:
            specs.append(spec)
    for i, extra in enumerate(s.container_mounts):
        if "," in extra:
            problems.append(Problem(f"cluster.slurm.container_mounts.{i}", "one SRC:DST[:FLAGS] per item; "
                                    "',' is not allowed inside an item", extra))
        elif extra not in specs:
            specs.append(extra)
    return [(f"--container-image={image}", image_field),
            (f"--container-mounts={','.join(specs)}", "cluster.slurm.container_mounts"),
            (f"--container-workdir={s.container_workdir or run_dir}", "cluster.slurm.container_workdir")]


def _nsys_nodes(job: Job, problems: list[Problem]) -> list[int]:
    """Nodes hosting the profiled ranks: torchrun gives node n the ranks n*procs .. (n+1)*procs-1."""
    c, ranks = job.cluster, job.debug.nsys.ranks
    bad = [r for r in ranks if r < 0 or r >= c.world_size]
    if bad or not ranks:
        problems.append(Problem("debug.nsys.ranks", f"ranks must be within 0..{c.world_size - 1}", str(bad)))
    return sorted({r // c.procs_per_node for r in ranks if 0 <= r < c.world_size})


def _node_script(job: Job, sub: Submission) -> str:
    """bash run by srun on every node; values come from the exported MTK_* variables, never pasted in."""
    s = job.cluster.slurm
    lines = []
    if s.venv:
        lines += [
            'if [ ! -f "$MTK_VENV/bin/activate" ]; then',
            '  echo "mtk: error: $MTK_VENV/bin/activate not found on $(hostname): cluster.slurm.venv must be a'
            ' virtualenv that every node can read" >&2',
            "  exit 127",
            "fi",
            '. "$MTK_VENV/bin/activate"',
        ]
    elif s.conda_env:
        lines += [
            "if ! command -v conda >/dev/null; then",
            '  echo "mtk: error: conda not found on $(hostname): put it on PATH in ~/.bashrc or use'
            ' cluster.slurm.venv" >&2',
            "  exit 127",
            "fi",
            'eval "$(conda shell.bash hook)" && conda activate "$MTK_CONDA_ENV" || exit 127',
        ]
    lines += [
        'if ! command -v "$1" >/dev/null; then',
        # (in MTK_NODE_SH's single quotes: no single quote here; \" prints a double quote on the node)
        '  echo "mtk: error: $1 not found on $(hostname): install mtk from a clone of its repository'
        ' (pip install \\".[train]\\" in it; the name mtk on PyPI is another project) in the environment the'
        ' nodes run" >&2',
        "  exit 127",
        "fi",
    ]
    if sub.step == Step.TRAIN and job.debug.nsys.enabled:
        # The whole node agent runs under nsys; capture starts and stops where the engine calls
        # cudaProfilerStart/Stop (debug.nsys.start/stop on debug.nsys.ranks).
        lines += [
            'case ",$MTK_NSYS_NODES," in',
            '  *",$SLURM_NODEID,"*)',
            '    exec nsys profile --output="$MTK_RUN_DIR/debug/nsys-%h-%p" --force-overwrite=true \\',
            "      --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi --capture-range-end=stop"
            ' "$@" ;;',
            "esac",
        ]
    lines.append('exec "$@"')
    return "\n" + "\n".join(lines) + "\n"
