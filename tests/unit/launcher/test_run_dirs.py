"""One run directory per launch (issue 44, item 3): a launch makes its run dir exclusively, so launches of one job
name in the same second each get their own (``-2``, ``-3``, …) instead of sharing one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

RESERVE = """
import sys, time
from pathlib import Path
from mtk.runs import reserve_run_dir
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
made, run_dir = reserve_run_dir(sys.argv[1])
print(made[0], run_dir)
"""


def _released_together(tmp_path: Path, argvs: list[list[str]], cwd: Path) -> list[subprocess.CompletedProcess]:
    """Real processes started at once: each waits for the same file, which appears once all are running."""
    go = tmp_path / "go"
    procs = [subprocess.Popen(["sh", "-c", f'while [ ! -e "{go}" ]; do sleep 0.01; done; exec "$@"', "sh", *argv],
                              cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for argv in argvs]
    go.touch()
    return [subprocess.CompletedProcess(p.args, p.wait(), *p.communicate()) for p in procs]


def test_many_reservations_of_one_name_at_once_get_a_dir_each(tmp_path):
    wanted = tmp_path / "runs" / "same-20260101-000000"
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RESERVE, str(wanted), str(go)], stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    go.touch()
    made = [p.communicate()[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(dir_ == run_dir for dir_, run_dir in made)  # on this machine the dir made is the run dir
    names = sorted(Path(d).name for d, _ in made)
    assert names == sorted([wanted.name] + [f"{wanted.name}-{n}" for n in range(2, 9)]), names
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == names


def test_two_launches_of_one_name_in_the_same_second_write_two_run_dirs(tmp_path):
    argv = [sys.executable, "-m", "mtk", "launch", str(EXAMPLES / "tiny.yaml"), "--dry-run", "--set", "name=same"]
    outs = _released_together(tmp_path, [argv] * 3, cwd=tmp_path)
    assert [o.returncode for o in outs] == [0, 0, 0], [o.stderr for o in outs]
    previews = [o.stdout.splitlines()[-1].removeprefix("dry run: nothing submitted; preview written to ")
                for o in outs]
    assert len(set(previews)) == 3, previews
    assert sorted(str(p) for p in (tmp_path / "runs").iterdir()) == sorted(previews)
    assert all((Path(p) / "job.json").is_file() for p in previews)  # each wrote its own, none over another's
