"""The worker's command line: a missing job file is a clear usage error, not a traceback."""

from __future__ import annotations

import pytest
from mtk.training import worker


def test_missing_job_file_names_it(tmp_path, capsys):
    rc = worker.main(["--job", str(tmp_path / "nope.json"), "--run-dir", str(tmp_path)])
    assert rc == 2
    assert "nope.json does not exist" in capsys.readouterr().err


def test_run_dir_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        worker.main(["--job", "x.json"])
    assert exc.value.code == 2
    assert "--run-dir" in capsys.readouterr().err


def test_entrypoint_dispatches_worker_to_this_module():
    from mtk.steps import Step

    assert Step.WORKER.module == worker.__name__
