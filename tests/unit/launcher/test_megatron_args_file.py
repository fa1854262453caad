"""The arguments are visible before the run: ``mtk render --out`` and ``mtk launch --dry-run`` write
``megatron_lm_args.txt`` (launcher/megatron_args_file.py) — the pretrain_gpt.py arguments the run starts as, from the
same functions the run uses beside each checkpoint (tests/integration/training/test_training_engine.py compares the
two files on a real run). A user diffs it with the script the spec came from (``mtk import SCRIPT --show-args``)."""

from __future__ import annotations

from pathlib import Path

from mtk.launcher.cli import main
from mtk.launcher.megatron_args_file import FILE, args_file
from mtk.launcher.megatron_import import import_text

from mtk.spec.loader import apply_overrides, load_job, read_yaml, validate

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "examples" / "tiny.yaml"
FIXTURES = REPO / "tests" / "fixtures" / "megatron_import"


def test_render_and_the_dry_run_write_the_arguments_the_run_starts_as(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = str(tmp_path / "runs" / "tiny-1")
    assert main(["render", str(TINY), "--out", str(tmp_path / "out"), "--run-dir", run_dir]) == 0
    assert main(["launch", str(TINY), "--dry-run", "--no-megatron-check", "--out", str(tmp_path / "preview"),
                 "--run-dir", run_dir]) == 0
    rendered = (tmp_path / "out" / FILE).read_text()
    assert (tmp_path / "preview" / FILE).read_text() == rendered
    array = rendered[rendered.index("MEGATRON_LM_ARGS=("):]
    assert "  --num-layers 2\n" in array and "  --train-iters 30\n" in array and "  --mock-data\n" in array
    # it is an argument file mtk import reads back to the same spec: nothing refused, the same model and schedule
    job = load_job(TINY)
    back = import_text(rendered, name=job.name)
    assert back.refused == []
    again = validate({**back.spec, "cluster": read_yaml(TINY)["cluster"]})
    assert again.model.model_dump(exclude={"preset"}) == job.model.model_dump(exclude={"preset"})
    assert (again.train.iterations, again.train.global_batch_size, again.train.lr) == \
        (job.train.iterations, job.train.global_batch_size, job.train.lr)


def test_the_file_is_a_pure_function_of_the_job_and_says_what_only_the_run_knows(tmp_path):
    job = validate(apply_overrides(read_yaml(TINY), [f"data.dir={tmp_path / 'absent'}"]))
    assert args_file(job) == args_file(job)
    folders = validate({**read_yaml(TINY), "data": {"dir": str(tmp_path / "absent"),
                                                    "folders": [{"path": "web", "weight": 1.0}]}})
    text = args_file(folders)  # the folders do not exist here: nothing is read from them
    assert "# data.folders: their prefixes and weights join --data-path when the run starts" in text
    assert "--mock-data" not in text


def test_the_diff_a_user_runs_against_their_script(capsys):
    """docs/megatron-import.md: `diff <(mtk import SCRIPT --show-args | sort) <(grep -v '^#' FILE | sort)`."""
    assert main(["import", str(FIXTURES / "quoted_strings.sh"), "--show-args"]) == 0
    script_args = set(capsys.readouterr().out.splitlines())
    spec = import_text((FIXTURES / "quoted_strings.sh").read_text()).spec
    written = {line for line in args_file(validate(spec)).splitlines() if not line.startswith("#")}
    assert "  --num-layers 8" in script_args & written and "  --global-batch-size 32" in script_args & written
    # what differs is what mtk decides itself or writes explicitly (Megatron-LM's defaults, the derived sizes)
    assert "  --transformer-impl transformer_engine" in script_args - written
    assert "  --kv-channels 64" in written - script_args
