"""`mtk ls` asks Slurm once for all its runs (SlurmBackend.prefetch), not three or four calls per run, and shows
the same states as asking run by run (issue 45: 1,000 runs took ~30 s)."""

from __future__ import annotations

from pathlib import Path

from mtk.slurm.backend import SlurmBackend
from mtk.slurm.commands import JobInfo

from mtk.runs import Run


class CountingSlurm:
    """Answers like the real client from fixed tables; counts every call and the ids each was asked."""

    def __init__(self, squeue, scontrol, sacct):
        self.tables = {"squeue": squeue, "scontrol": scontrol, "sacct": sacct}
        self.calls: list[tuple[str, list[str]]] = []

    def _ask(self, what, ids):
        ids = list(ids)
        self.calls.append((what, ids))
        return {i: JobInfo(**vars(self.tables[what][i])) for i in ids if i in self.tables[what]}

    def squeue(self, ids):
        return self._ask("squeue", ids)

    def scontrol(self, ids):
        return self._ask("scontrol", ids)

    def sacct(self, ids):
        return self._ask("sacct", ids)


def _runs(tmp_path: Path, count: int) -> list[Run]:
    runs = []
    for i in range(count):
        d = tmp_path / f"r{i}"
        (d / "state").mkdir(parents=True)
        ids = {"train": str(100 + i)}
        if i == 0:  # a requeued run: its successor is asked about too
            (d / "state" / "successors").write_text("900\n")
        if i == 2:  # forgotten by Slurm and accounting: its exit file answers
            (d / "state" / f"train.{100 + i}.exit").write_text("3\n")
        runs.append(Run(backend="slurm", run_dir=str(d), name=f"r{i}", ids=ids))
    return runs


def _tables():
    squeue = {"100": JobInfo("100", "COMPLETED"), "900": JobInfo("900", "RUNNING"),
              "101": JobInfo("101", "PENDING", "Priority")}
    scontrol = {"100": JobInfo("100", "COMPLETED", exit_code=0, restarts=1), "900": JobInfo("900", "RUNNING"),
                "101": JobInfo("101", "PENDING", "Priority")}
    sacct = {str(100 + i): JobInfo(str(100 + i), "FAILED", exit_code=1) for i in range(3, 40)}
    return squeue, scontrol, sacct


def test_prefetch_asks_once_for_every_run_and_status_then_asks_nothing(tmp_path):
    runs = _runs(tmp_path, 40)
    slurm = CountingSlurm(*_tables())
    backend = SlurmBackend(slurm)
    backend.prefetch(runs)
    asked = [what for what, _ in slurm.calls]
    assert asked == ["squeue", "scontrol", "sacct"], slurm.calls
    assert sorted(slurm.calls[1][1]) == ["100", "101", "900"]  # scontrol only for the jobs squeue still knows
    assert "102" in slurm.calls[2][1] and "100" not in slurm.calls[2][1]  # sacct for the rest
    slurm.calls.clear()
    batched = [[(s.step, s.state, s.exit_code) for s in backend.status(r)] for r in runs]
    assert slurm.calls == []
    one_by_one = [[(s.step, s.state, s.exit_code) for s in SlurmBackend(CountingSlurm(*_tables())).status(r)]
                  for r in runs]
    assert batched == one_by_one
    assert batched[0] == [("train", "COMPLETED", 0), ("train#2", "RUNNING", None)]
    assert batched[2] == [("train", "FAILED", 3)] and batched[5] == [("train", "FAILED", 1)]


def test_prefetch_chunks_thousands_of_ids(tmp_path):
    runs = _runs(tmp_path, 1200)
    slurm = CountingSlurm({}, {}, {})
    SlurmBackend(slurm).prefetch(runs)
    sizes = [len(ids) for what, ids in slurm.calls if what == "squeue"]
    assert sum(sizes) == 1201 and max(sizes) <= 500


def test_a_run_prefetch_did_not_cover_is_asked_directly(tmp_path):
    runs = _runs(tmp_path, 4)
    slurm = CountingSlurm(*_tables())
    backend = SlurmBackend(slurm)
    backend.prefetch(runs[:2])
    slurm.calls.clear()
    assert [s.state for s in backend.status(runs[3])] == ["FAILED"]
    assert slurm.calls[0][0] == "squeue"
