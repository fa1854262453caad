"""The Slurm client commands mtk runs (sbatch, squeue, scontrol, sacct, scancel) and their output parsers.

Only this module starts Slurm processes, so the backend's logic is testable with captured output. ``sacct``
is used only when the cluster has accounting; many clusters have none.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Iterable, Mapping

from mtk.exitcodes import UserFacingError
from mtk.spec.errors import Problem, SpecError

TIMEOUT = 60


class SlurmError(UserFacingError, RuntimeError):
    """A Slurm command failed for a reason that is not the job spec's fault (controller down, no Slurm)."""


class SubmitRejected(SpecError):
    """sbatch refused the job; ``problems`` name the spec field to change and carry Slurm's own words."""


@dataclasses.dataclass
class JobInfo:
    """What Slurm says about one job, from squeue, scontrol or sacct."""

    id: str
    state: str  # Slurm's state name, e.g. PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    nodes: str = ""
    restarts: int = 0
    stdout: str = ""
    source: str = ""


def run(argv: list[str], slurm_conf: str | None = None, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run a Slurm client; a missing binary or a hang becomes a SlurmError naming the command."""
    env = dict(os.environ)
    if slurm_conf and not env.get("SLURM_CONF"):
        env["SLURM_CONF"] = slurm_conf
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmUnreachable(not_on_path(argv[0])) from None
    except subprocess.TimeoutExpired:
        conf = env.get("SLURM_CONF") or "the default slurm.conf (SLURM_CONF is not set)"
        raise SlurmUnreachable(f"`{' '.join(argv[:3])} ...` did not answer in {timeout:.0f} s: is slurmctld up and "
                               f"reachable? The controller comes from {conf}; point SLURM_CONF at another "
                               "cluster's slurm.conf, or run mtk on its login node") from None


class SlurmUnreachable(SlurmError):
    """No Slurm to talk to from here (client commands missing, controller silent): set-up, exit 2."""

    exit_code = 2


def not_on_path(command: str) -> str:
    """Why ``command`` cannot run here: where it was looked for and how to point elsewhere."""
    return (f"{command} not found on PATH ({os.environ.get('PATH', '')}): run mtk on a Slurm login node, or put "
            "Slurm's client commands on PATH (e.g. PATH=/opt/slurm/bin:$PATH); --dry-run renders the batch "
            "scripts without Slurm")


# sbatch's error text -> the spec field a user changes to fix it.
REJECTIONS: list[tuple[str, str, str]] = [
    (r"invalid partition", "cluster.slurm.partition", "pick one from `sinfo -s`"),
    (r"invalid account", "cluster.slurm.account", "pick one from `sacctmgr show assoc user=$USER`"),
    (r"invalid qos", "cluster.slurm.qos", "pick one from `sacctmgr show qos`"),
    (r"time limit|--time specification|invalid time", "cluster.slurm.time",
     "stay within the partition's MaxTime (`sinfo -o '%P %l'`)"),
    (r"memory specification", "cluster.slurm.mem", "ask for at most the nodes' memory (`sinfo -o '%P %m'`)"),
    (r"cpu count per node", "cluster.slurm.cpus_per_task", "ask for at most the nodes' CPUs (`sinfo -o '%P %c'`)"),
    (r"generic resource|gres", "cluster.procs_per_node",
     "GPUs per node must exist on the partition (`sinfo -o '%P %G'`); CPU clusters need cluster.device: cpu"),
    (r"node count specification|requested node configuration", "cluster.nodes",
     "the partition has fewer or smaller nodes (`sinfo -o '%P %D %c %m %G'`)"),
    (r"feature specification|unrecognized option|invalid option", "cluster.slurm.extra_sbatch",
     "fix or remove the extra sbatch option"),
]


def parse_submit(result: subprocess.CompletedProcess, values: Mapping[str, object] | None = None) -> str:
    """The job id from ``sbatch --parsable`` (``ID`` or ``ID;cluster``), or SubmitRejected/SlurmError."""
    out = result.stdout.strip()
    if result.returncode == 0 and re.match(r"^\d+(;\S+)?$", out):
        return out.split(";")[0]
    text = " ".join(line.strip() for line in (result.stderr + result.stdout).splitlines() if line.strip())
    text = text or f"sbatch exited with {result.returncode} and printed nothing"
    lower = text.lower()
    for pattern, field, hint in REJECTIONS:
        if re.search(pattern, lower):
            value = (values or {}).get(field)
            raise SubmitRejected([Problem(field, f"sbatch rejected the job: {text} — {hint}", value)])
    raise SlurmError(f"sbatch failed: {text}")


def parse_squeue(text: str) -> dict[str, JobInfo]:
    """Lines of ``squeue -h -o '%i|%T|%r|%N'``."""
    jobs = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0]:
            reason = "" if parts[2] in ("None", "(null)") else parts[2]
            jobs[parts[0]] = JobInfo(id=parts[0], state=parts[1], reason=reason, nodes=parts[3], source="squeue")
    return jobs


_SCONTROL_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z:/_]*)=")


def parse_scontrol_record(line: str) -> dict[str, str]:
    """One line of ``scontrol show job -o``: Key=Value pairs whose values may contain spaces."""
    marks = [(m.start(1), m.end(), m.group(1)) for m in _SCONTROL_KEY.finditer(line)]
    fields = {}
    for i, (_start, value_start, key) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(line)
        fields[key] = line[value_start:end].strip()
    return fields


def _exit_code(text: str) -> tuple[int | None, int | None]:
    match = re.match(r"^(\d+):(\d+)$", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else (None, None)


def parse_scontrol(text: str) -> dict[str, JobInfo]:
    """Records of ``scontrol show job -o``, by JobId; a job array's tasks also as one record under the array's
    id (:func:`array_state`): Slurm's record of that id is only one of its tasks."""
    jobs = {}
    arrays: dict[str, list[JobInfo]] = {}
    for line in text.splitlines():
        f = parse_scontrol_record(line)
        if "JobId" not in f:
            continue
        code, sig = _exit_code(f.get("ExitCode", ""))
        reason = f.get("Reason", "")
        rec = JobInfo(
            id=f["JobId"], state=f.get("JobState", "UNKNOWN"), reason="" if reason == "None" else reason,
            exit_code=code, signal=sig, nodes=f.get("NodeList", "") if f.get("NodeList") != "(null)" else "",
            restarts=int(f.get("Restarts", "0") or 0), stdout=f.get("StdOut", ""), source="scontrol")
        jobs[rec.id] = rec
        if f.get("ArrayJobId") and f.get("ArrayTaskId"):
            arrays.setdefault(f["ArrayJobId"], []).append(rec)
    for array_id, tasks in arrays.items():
        jobs[array_id] = array_state(array_id, tasks)
    return jobs


# Running before pending: a task running makes the array RUNNING (backend.STATES maps each to RUNNING/PENDING).
ARRAY_ACTIVE = ("RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "SUSPENDED",
                "STOPPED", "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD")


def array_state(array_id: str, tasks: list[JobInfo]) -> JobInfo:
    """A job array as one step: active while any task is (running before pending); else the first task that
    did not complete (what cancels the step after it); else completed."""
    for state in ARRAY_ACTIVE:
        active = [t for t in tasks if t.state == state]
        if active:
            return dataclasses.replace(active[0], id=array_id, exit_code=None, signal=None,
                                       nodes=",".join(t.nodes for t in tasks if t.nodes and t.state in ARRAY_ACTIVE))
    failed = [t for t in tasks if t.state != "COMPLETED"]
    own = next((t for t in tasks if t.id == array_id), tasks[0])
    return dataclasses.replace(failed[0] if failed else own, id=array_id,
                               restarts=sum(t.restarts for t in tasks))


def parse_sacct(text: str) -> dict[str, JobInfo]:
    """Lines of ``sacct -n -X -P -o JobID,State,ExitCode,NodeList``."""
    jobs = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        code, sig = _exit_code(parts[2])
        state = parts[1].split()[0]  # "CANCELLED by 0" -> CANCELLED
        jobs[parts[0]] = JobInfo(id=parts[0], state=state, exit_code=code, signal=sig, nodes=parts[3],
                                 source="sacct")
    return jobs


def has_gpu_gres(sinfo_gres: str) -> bool:
    """``sinfo -h -o %G`` lines, e.g. ``gpu:8``, ``gpu:h100:8(S:0-1)``, ``(null)``: any gpu GRES at all."""
    return any(re.match(r"^gpu(:|$)", item.strip()) for line in sinfo_gres.splitlines()
               for item in line.split(","))


class Slurm:
    """Slurm client calls for one cluster (``slurm_conf`` is used only when SLURM_CONF is not set)."""

    def __init__(self, slurm_conf: str | None = None):
        self.slurm_conf = slurm_conf
        self._accounting: bool | None = None

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        return run(argv, self.slurm_conf)

    def submit(self, argv: list[str], values: Mapping[str, object] | None = None) -> str:
        return parse_submit(self.run(argv), values)

    def ping(self) -> None:
        """``scontrol ping``: raise SlurmUnreachable (exit 2) naming where the controller was looked for when no
        controller answers, so a launch stops before it writes a run dir."""
        out = self.run(["scontrol", "ping"])
        if out.returncode == 0:
            return
        conf = os.environ.get("SLURM_CONF") or self.slurm_conf
        where = f"SLURM_CONF={conf}" if conf else "the default slurm.conf or DNS SRV records (SLURM_CONF is not set)"
        said = " ".join(line.strip() for line in (out.stderr or out.stdout).strip().splitlines()[-2:])
        raise SlurmUnreachable(f"no Slurm controller answers (`scontrol ping`: {said or out.returncode}); looked it "
                               f"up from {where}. Point SLURM_CONF at the cluster's slurm.conf or run mtk on its "
                               "login node; --dry-run renders the batch scripts without Slurm")

    def squeue(self, ids: Iterable[str]) -> dict[str, JobInfo]:
        ids = [i for i in ids if i]
        if not ids:
            return {}
        out = self.run(["squeue", "-h", "--states=all", f"--jobs={','.join(ids)}", "-o", "%i|%T|%r|%N"])
        if out.returncode != 0 and "invalid job id" not in out.stderr.lower():
            raise SlurmError(f"squeue failed: {out.stderr.strip() or out.returncode}")
        return parse_squeue(out.stdout)

    def scontrol(self, ids: Iterable[str]) -> dict[str, JobInfo]:
        jobs: dict[str, JobInfo] = {}
        for job_id in ids:
            out = self.run(["scontrol", "show", "job", "-o", job_id])
            if out.returncode == 0:
                jobs.update(parse_scontrol(out.stdout))
        return jobs

    def accounting(self) -> bool:
        """Whether sacct can answer (AccountingStorageType is not none)."""
        if self._accounting is None:
            out = self.run(["scontrol", "show", "config"])
            match = re.search(r"^AccountingStorageType\s*=\s*(\S+)", out.stdout, re.M)
            self._accounting = match is not None and match.group(1) != "accounting_storage/none"
        return self._accounting

    def sacct(self, ids: Iterable[str]) -> dict[str, JobInfo]:
        ids = [i for i in ids if i]
        if not ids or not self.accounting():
            return {}
        out = self.run(["sacct", "-n", "-X", "-P", "-o", "JobID,State,ExitCode,NodeList", f"--jobs={','.join(ids)}"])
        return parse_sacct(out.stdout) if out.returncode == 0 else {}

    def gpu_gres(self, partition: str | None) -> bool:
        """Whether the partition's (or the default partition's) nodes offer gpu GRES (``sinfo -o %G``)."""
        argv = ["sinfo", "-h", "-o", "%G"] + ([f"--partition={partition}"] if partition else [])
        out = self.run(argv)
        if out.returncode != 0:
            raise SlurmError(f"sinfo failed: {out.stderr.strip() or out.returncode} (cluster.slurm.gpu_request "
                             "auto asks it whether the nodes have gpu GRES; set gres or none to skip the question)")
        return has_gpu_gres(out.stdout)

    def hostnames(self, nodelist: str) -> list[str]:
        if not nodelist:
            return []
        out = self.run(["scontrol", "show", "hostnames", nodelist])
        return out.stdout.split() if out.returncode == 0 else []

    def cancel(self, ids: Iterable[str] = (), names: Iterable[str] = ()) -> None:
        """scancel the ids and every job with these names; already-finished jobs are not an error."""
        ids, names = [i for i in ids if i], [n for n in names if n]
        calls = ([["scancel", *ids]] if ids else []) + [["scancel", f"--name={name}"] for name in names]
        for argv in calls:
            out = self.run(argv)
            if out.returncode != 0 and "unable to contact" in out.stderr.lower():
                raise SlurmError(f"scancel failed: {out.stderr.strip()}")
