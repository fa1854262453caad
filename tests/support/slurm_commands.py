"""Slurm's query commands as a test double at their real boundary: ``squeue``, ``scontrol`` and ``sacct``
executables on PATH that print, per job id asked, what Slurm printed for that job (files under a data dir), so mtk's
own subprocess calls, parsing and batching run unchanged. The tests check it against mtk's reading of Slurm
(tests/unit/slurm/test_slurm_commands_double.py); benchmarks/scale_launcher.py times mtk's verbs on it at 1,024
nodes. Where a real cluster is needed, the tests start one (support.minicluster)."""

from __future__ import annotations

import stat
from pathlib import Path


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def install(bin_dir: Path, data: Path) -> None:
    """squeue/scontrol/sacct in ``bin_dir`` answering from ``data``/<command>.<job id> (as Slurm's do, per id)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    ids = 'ids=""; for a in "$@"; do case "$a" in --jobs=*) ids="${a#--jobs=}";; esac; done\n'
    for cmd in ("squeue", "sacct"):  # one cat for all the ids asked ([ -e ] is a builtin: no fork per id)
        _script(bin_dir / cmd, ids + f'files=(); for i in ${{ids//,/ }}; do f="{data}/{cmd}.$i"; '
                'if [ -e "$f" ]; then files+=("$f"); fi; done\n'
                'if [ ${#files[@]} -gt 0 ]; then cat "${files[@]}"; fi\nexit 0\n')
    _script(bin_dir / "scontrol", f"""case "$1 $2" in
  "show config") echo "AccountingStorageType   = accounting_storage/slurmdbd";;
  "show job") cat "{data}/scontrol.${{@: -1}}" 2>/dev/null || exit 1;;
  "show hostnames") echo;;
  *) exit 0;;
esac
""")


def nodelist(prefix: str, numbers: list[int], width: int = 4) -> str:
    """Slurm's compressed host list of ``prefix`` + zero-padded ``numbers`` (sorted, distinct), as squeue and
    scontrol print it: ``node[0001-0100,0102-0200]``; one host alone is its name. The inverse of
    :func:`mtk.slurm.environment.expand_nodelist`, which the tests hold it to."""
    ranges, start = [], None
    for i, n in enumerate(numbers):
        start = n if start is None else start
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            ranges.append(f"{start:0{width}d}" if start == n else f"{start:0{width}d}-{n:0{width}d}")
            start = None
    if len(numbers) == 1:
        return f"{prefix}{numbers[0]:0{width}d}"
    return f"{prefix}[{','.join(ranges)}]"


def allocation(nodes: int, bad: int = 100) -> list[int]:
    """The host numbers of an allocation of ``nodes``: every 10th of the first ``bad``×10 is excluded (the holes an
    earlier attempt's excluded nodes leave stay in the list)."""
    excluded = {10 * i + 3 for i in range(min(bad, nodes // 4))}
    hosts, h = [], 1
    while len(hosts) < nodes:
        if h not in excluded:
            hosts.append(h)
        h += 1
    return hosts


def failed_train_run(root: Path, data: Path, nodes: int, job_id: int, log_lines_per_node: int = 40) -> Path:
    """A Slurm run dir whose train job, after 3 requeues (3 successors), failed on the middle one of ``nodes``
    nodes, and what Slurm answers about each of its jobs (under ``data``)."""
    from mtk.runs import Run

    run_dir = root / f"big-{nodes}"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "state").mkdir()
    hosts = allocation(nodes)
    names = [f"node{h:04d}" for h in hosts]
    successors = [job_id + k for k in (1, 2, 3)]
    (run_dir / "state" / "successors").write_text("".join(f"{s}\n" for s in successors))
    for jid in (job_id, *successors):
        (run_dir / "state" / f"nodes.{jid}").write_text(" ".join(names) + "\n")
    events = []
    for k, jid in enumerate((job_id, *successors)):
        end = "exit 1" if k == 3 else "exit 42 requeued (signal)"
        events += [f"2026-11-28T0{k}:00:00Z train {jid} {jid} start attempt {k}",
                   f"2026-11-28T0{k}:30:00Z train {jid} {jid} {end}"]
    (run_dir / "state" / "events.log").write_text("\n".join(events) + "\n")
    bad = len(names) // 2
    with open(run_dir / "logs" / f"train-{successors[-1]}.out", "w") as fh:
        for it in range(log_lines_per_node):
            for t in range(len(names)):
                fh.write(f"{t}: [rank {8 * t}] iteration {it:>6} | step 1234.5 ms | lm loss 2.3456 | tokens 1.2M/s\n")
        fh.write(f"{bad}: RuntimeError: NCCL communicator was aborted on rank {8 * bad}\n")
        fh.write(f"srun: error: {names[bad]}: task {bad}: Exited with exit code 1\n")
    for jid in (job_id, *successors):
        (run_dir / "logs" / f"train-{jid}.out").touch(exist_ok=True)
    hostlist = nodelist("node", hosts)
    last = successors[-1]
    for jid in (job_id, *successors):
        failed = jid == last
        state, code = ("FAILED", "1:0") if failed else ("COMPLETED", "42:0")
        (data / f"squeue.{jid}").write_text(f"{jid}|{state}|NonZeroExitCode|{hostlist}\n" if failed else "")
        (data / f"scontrol.{jid}").write_text(
            f"JobId={jid} JobName=big-train UserId=u(1000) JobState={state} Reason=NonZeroExitCode "
            f"Dependency=(null) Requeue=1 Restarts={3 if failed else 0} BatchFlag=1 ExitCode={code} "
            f"RunTime=00:30:00 TimeLimit=2-00:00:00 NodeList={hostlist} BatchHost={names[0]} NumNodes={nodes} "
            f"NumCPUs={nodes * 96} NumTasks={nodes} TRES=cpu={nodes * 96},node={nodes},gres/gpu={8 * nodes} "
            f"StdOut={run_dir}/logs/train-{jid}.out\n" if failed else "")
        steps = [f"{jid}|{state}|{code}|{hostlist}", f"{jid}.batch|{state}|{code}|{names[0]}",
                 f"{jid}.extern|COMPLETED|0:0|{hostlist}", f"{jid}.0|{state}|{code}|{hostlist}"]
        (data / f"sacct.{jid}").write_text("\n".join(steps) + "\n")
    Run(backend="slurm", run_dir=str(run_dir), name="big", ids={"train": str(job_id)}).save()
    return run_dir
