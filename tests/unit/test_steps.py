"""A run's steps, their states and the registries' loader have one home in the core (mtk.steps, mtk.loading): each
member is its string, so run records, rendered files and JSON keep their bytes; the entrypoint reads its steps
from the registry and still imports only the step it runs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mtk.loading import LoadError, load
from mtk.spec.loader import load_job
from mtk.steps import DATA_STEPS, PIPELINE, Step, StepState

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_each_member_is_its_string():
    assert [str(s) for s in PIPELINE] == ["getdata", "preprocess", "train"] and PIPELINE[:2] == DATA_STEPS
    assert Step.TRAIN == "train" and f"{Step.PREPROCESS}" == "preprocess" and type(str(Step.TRAIN)) is str
    assert {Step.TRAIN: 1}["train"] == 1 and {"train": 1}[Step.TRAIN] == 1  # same hash: dict keys interchange
    assert json.dumps({Step.TRAIN: StepState.FAILED}) == '{"train": "FAILED"}'
    assert [str(s) for s in StepState] == ["PENDING", "RUNNING", "COMPLETED", "STOPPED", "FAILED", "CANCELLED",
                                           "UNKNOWN"]
    assert f"{StepState.STOPPED:<10}|" == "STOPPED   |"  # `mtk status` pads states


def test_a_spec_needs_its_steps_in_pipeline_order():
    steps = load_job(EXAMPLES / "gpt-7.5b-p5-slurm.yaml", backend="slurm").steps()  # fetches and tokenizes
    assert steps == [Step.GETDATA, Step.PREPROCESS, Step.TRAIN] == ["getdata", "preprocess", "train"]
    assert load_job(EXAMPLES / "tiny.yaml").steps() == [Step.TRAIN]


def test_every_step_names_a_module_that_exists():
    for step in Step:
        assert importlib.util.find_spec(step.module) is not None, step
        assert step.summary, step
    assert [s for s in Step if s.cuda] == ["train", "worker", "doctor", "preflight"]


def test_the_entrypoint_lists_the_registry_and_imports_no_step_to_do_so():
    code = ("import sys\nfrom mtk.launcher.entrypoint import usage\nprint(usage())\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron') "
            "or m.startswith(('mtk.training', 'mtk.data_jobs', 'mtk.containers'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    width = max(map(len, Step))  # the usage aligns the help lines after the longest name
    for step in Step:
        assert f"  {step:<{width}}  {step.summary}\n" in out
    assert out.rstrip().endswith("[]")


def test_load_reads_module_colon_attribute(tmp_path, monkeypatch):
    assert load("mtk.steps:Step.TRAIN") is Step.TRAIN
    assert load("mtk.steps", default="PIPELINE") is PIPELINE
    assert load("mtk.steps") is sys.modules["mtk.steps"]  # no attribute: the module itself
    for target, why in [("mtk.nope:x", "no module named 'mtk.nope'"), ("nopkg.mod:x", "no module named 'nopkg'"),
                        ("mtk.steps:Nope", "mtk.steps has no attribute 'Nope'"),
                        ("mtk.steps:", "expected 'package.module:attribute'")]:
        with pytest.raises(LoadError, match=f"cannot load '{target}': {why}"):
            load(target)


def test_a_library_missing_inside_the_module_is_not_hidden(tmp_path, monkeypatch):
    """The error boundary names the extra that installs a missing library: load passes that error on unchanged."""
    (tmp_path / "mtk_probe_needs_lib.py").write_text("import mtk_probe_absent_library\nmain = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as exc:
        load("mtk_probe_needs_lib:main")
    assert exc.type is ModuleNotFoundError and exc.value.name == "mtk_probe_absent_library"


# ---- a new pipeline step is one line in Step: every backend schedules it where the registry puts it -------------
NEW_STEP_PROBE = '''
import json, pathlib, sys
line = '    DEDUPE = ("dedupe", "mtk.data_jobs.dedupe", "drop duplicate documents", False, "data.corpus")\\n'
source = pathlib.Path(sys.argv[1]).read_text().replace("    PREPROCESS = (", line + "    PREPROCESS = (", 1)
module = type(sys)("mtk.steps")
module.__file__ = sys.argv[1]
sys.modules["mtk.steps"] = module
exec(compile(source, sys.argv[1], "exec"), module.__dict__)  # the registry with one more line, nothing else
from mtk.backends import get_backend
from mtk.spec.loader import load_job
out = {}
for example, backend, overrides in (("gpt-7.5b-p5-slurm.yaml", "slurm", []), ("gpt-7.5b-p5-eks.yaml", "eks", []),
                                    ("gpt-7.5b-p5-slurm.yaml", "local", ["cluster.nodes=1"])):
    job = load_job(pathlib.Path(sys.argv[2]) / example, overrides)
    files = get_backend(backend).render(job, "/fsx/runs/probe").files
    out[backend] = {"steps": [str(s) for s in job.steps()], "files": sorted(files),
                    "plan": json.loads(files.get("steps.json", "{}")).get("steps", [])}
print(json.dumps(out))
'''


def test_a_new_pipeline_step_is_one_registry_line_for_every_backend():
    """With one more line in Step (a data step switched on by data.corpus, between getdata and preprocess) and no
    other change, the spec schedules it in order and Slurm, EKS and the local backend each render it as a job."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", NEW_STEP_PROBE, str(root / "mtk" / "steps.py"), str(root / "examples")],
                         capture_output=True, text=True, check=True).stdout
    found = json.loads(out.splitlines()[-1])
    for backend in ("slurm", "eks", "local"):
        assert found[backend]["steps"] == ["getdata", "dedupe", "preprocess", "train"], found[backend]
    assert {"getdata.sbatch", "dedupe.sbatch", "preprocess.sbatch", "train.sbatch"} <= set(found["slurm"]["files"])
    assert "steps/dedupe.yaml" in found["eks"]["files"]
    assert [s["step"] for s in found["local"]["plan"]] == ["getdata", "dedupe", "preprocess", "train"]
