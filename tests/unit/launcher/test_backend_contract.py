"""The backend contract: one list of names, each backend's facts and rules behind it, refusals named."""

from __future__ import annotations

import pytest

from mtk.backend_registry import backend_names
from mtk.backends import Backend, backend_class, get_backend
from mtk.spec import SpecError, validate

TINY = {"name": "c", "model": {"preset": "tiny"}, "cluster": {"nodes": 1, "procs_per_node": 1, "device": "cpu"}}


def test_one_list_of_names_the_default_first():
    assert backend_names()[:3] == ["local", "slurm", "eks"]
    assert all(issubclass(backend_class(n), Backend) and backend_class(n).name == n for n in backend_names())
    with pytest.raises(KeyError, match="the installed ones are local, slurm, eks"):
        backend_class("nope")


def test_a_run_of_a_backend_not_installed_here_is_named_with_exit_2(tmp_path):
    """The run record asks the registry's names (mtk.backend_registry), not the backend contract: no module of the
    two imports the other."""
    from click.testing import CliRunner
    from mtk.launcher.cli import cli

    from mtk.runs import Run

    (tmp_path / "r").mkdir()
    Run(backend="gone", run_dir=str(tmp_path / "r"), name="r").save()
    result = CliRunner().invoke(cli, ["status", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    assert f"{tmp_path / 'r' / 'run.json'}: unknown backend 'gone' (one of local, slurm, eks)" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("backend", "sets", "field"), [
    ("local", {"nodes": 2}, "cluster.nodes"),
    ("slurm", {"slurm": {"runtime": "bare", "venv": "/v", "conda_env": "c"}}, "cluster.slurm.conda_env"),
    ("eks", {}, "image.registry"),
])
def test_each_backend_validates_its_own_rules(backend, sets, field):
    data = {**TINY, "cluster": {**TINY["cluster"], **sets}}
    assert field in [p.path for p in backend_class(backend).validate(validate(data))]
    with pytest.raises(SpecError) as err:
        validate(data, backend=backend)
    assert field in [p.path for p in err.value.problems]


def test_launch_options_are_refused_by_a_backend_without_steps_to_follow():
    with pytest.raises(ValueError, match="follow the steps of an EKS launch; --backend slurm has no such steps"):
        get_backend("slurm").launch_options(wait=True, timeout=None)
    assert get_backend("local").launch_options(wait=None, timeout=None) == {}
    assert get_backend("eks").launch_options(wait=None, timeout="30m") == {"wait": True, "timeout": 1800.0}
    with pytest.raises(ValueError, match="--timeout bounds --wait"):
        get_backend("eks").launch_options(wait=False, timeout="30m")


def test_nsys_is_refused_where_no_backend_wires_it():
    data = {**TINY, "debug": {"nsys": {"enabled": True}}}
    with pytest.raises(SpecError, match=r"wired into the slurm backend only, not eks"):
        validate({**data, "image": {"registry": "r.example"}}, backend="eks")
    assert validate({**data, "cluster": {**TINY["cluster"], "slurm": {"runtime": "bare"}}}, backend="slurm")


@pytest.mark.parametrize("name", backend_names())
def test_the_note_after_submit_does_not_repeat_the_step_id_lines(name):
    """`mtk launch` prints each step's id once (``runner: 4242``); a backend's note explains, never says it again."""
    from mtk.runs import Run

    run = Run(backend=name, run_dir="/runs/r", name="r", ids={"runner": "4242", "train": "PyTorchJob/r"},
              backend_notes={"namespace": "default", "run_id": "r"})
    note = get_backend(name).submitted_note(run, {"wait": False}, None)
    assert "runner:" not in note and "train:" not in note and "4242" not in note, note
