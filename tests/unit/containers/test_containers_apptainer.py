"""spython's definition with its known bugs fixed; golden file + the fixes exercised with a real /bin/sh.

Regenerate the golden after an intended change: `make golden` (MTK_REGEN_GOLDEN=1)
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from mtk.containers.apptainer import definition, prepare_dockerfile, runscript
from mtk.containers.recipe import make_recipe

from mtk.spec import load_job

REPO = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parent / "golden"
CONTEXT = Path("/build/mtk-image/context")


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("MTK_REGEN_GOLDEN") == "1":
        path.write_text(text)
    expected = path.read_text()
    assert text == expected, f"{name} changed; if intended: make golden"


def recipe():
    return make_recipe(load_job(REPO / "examples" / "tiny.yaml"), REPO)


def test_dockerfile_and_definition_golden():
    rec = recipe()
    text = rec.dockerfile.replace(rec.wheel_name, "mtk-VERSION-py3-none-any.whl")
    golden("Dockerfile", text)
    golden("mtk.def", definition(text, CONTEXT, {"INSTALL_EFA": "0"}))


def test_spython_bugs_are_fixed():
    rec = recipe()
    text = definition(rec.dockerfile, CONTEXT, {"INSTALL_EFA": "0", "MEGATRON_CORE_VERSION": ""})
    post = text.split("%post\n", 1)[1].split("\n%", 1)[0]
    # ENV/ARG exported, build args substituted
    assert "\nexport INSTALL_EFA=0\n" in post and "\nexport MEGATRON_CORE_VERSION=''\n" in post
    assert "\nexport NCCL_NET_PLUGIN=ofi\n" in post and "\nexport PIP_BREAK_SYSTEM_PACKAGES=1\n" in post
    assert not re.search(r"^[A-Z_]+=", post, re.M)
    # COPY sources are absolute (the build context)
    files = text.split("%files\n", 1)[1].split("\n%", 1)[0].splitlines()
    assert files == [f"{CONTEXT}/requirements.txt /opt/mtk/requirements.txt",
                     f"{CONTEXT}/{rec.wheel_name} /opt/mtk/{rec.wheel_name}"]
    # each RUN is its own subshell: `exit 0` in a skipped step does not end %post
    assert post.count("( set -eu;") >= 5
    run = 'if [ $# -gt 0 ]; then\n    exec mtk-entrypoint "$@"\nelse\n    exec mtk-entrypoint --help\nfi'
    assert f"%runscript\n{run}" in text and f"%startscript\n{run}" in text


def test_post_runs_every_step_even_when_one_exits_early(tmp_path):
    dockerfile = ("FROM base\nARG SKIP=1\nENV GREETING=hello\n"
                  "RUN if [ \"$SKIP\" = 1 ]; then echo skipped; exit 0; fi; echo ran\n"
                  "RUN cd /tmp && sh -c 'echo \"$GREETING\"'\nRUN pwd\n")
    text = definition(dockerfile, tmp_path)
    post = text.split("%post\n", 1)[1].split("\n%", 1)[0]
    out = subprocess.run(["sh", "-c", post], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.split() == ["skipped", "hello", "/"]


def test_runscript_quotes_exec_form_words(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("\n".join(runscript(["printf", "<%s>"], ["a b", "c"])) + "\n")
    out = lambda *a: subprocess.run(["sh", str(script), *a], capture_output=True, text=True).stdout  # noqa: E731
    assert out() == "<a b><c>" and out("x y") == "<x y>"


def test_prepare_keeps_exec_form_and_absolute_sources(tmp_path):
    text = prepare_dockerfile('RUN ["echo", "x"]\nCOPY --chown=1:1 a b /dst/\nCOPY /abs /dst\n', tmp_path)
    assert text.splitlines() == ['RUN ["echo", "x"]', f"COPY --chown=1:1 {tmp_path}/a {tmp_path}/b /dst/",
                                 "COPY /abs /dst"]


def test_apptainer_build_argv_with_a_stand_in(tmp_path, monkeypatch):
    """Apptainer is not installable here: a stand-in `apptainer` records argv and writes the image file."""
    from mtk.containers.apptainer import build_sif

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$CALLS"; echo sif > "$3"\n')
    (bin_dir / "apptainer").chmod(0o755)
    definition_path = tmp_path / "m.def"
    definition_path.write_text("Bootstrap: docker\n")
    sif = tmp_path / "out" / "m.sif"
    sif.parent.mkdir()
    lines: list[str] = []
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    assert build_sif(definition_path, sif, lines.append) is True
    argv = (tmp_path / "calls").read_text().splitlines()
    assert argv[:2] == ["build", "--force"] and argv[3] == str(definition_path)
    assert Path(argv[2]).parent == sif.parent and sif.read_text() == "sif\n" and not Path(argv[2]).exists()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert build_sif(definition_path, sif, lines.append) is False and "apptainer is not installed" in lines[-1]
