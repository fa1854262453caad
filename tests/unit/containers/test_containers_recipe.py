"""The rendered Dockerfile and requirements: switches, layer order, shell validity, content hash."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mtk.containers.recipe import (
    RecipeError,
    declared_args,
    find_source,
    make_recipe,
    requirements,
    wheel_name,
)

from mtk.spec import SpecError, load_job

REPO = Path(__file__).resolve().parents[3]
JOB = REPO / "examples" / "tiny.yaml"


def job(*overrides: str):
    return load_job(JOB, list(overrides))


def instructions(dockerfile: str) -> list[str]:
    """Logical instructions (continuations joined, comments dropped)."""
    out, current = [], ""
    for line in dockerfile.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").strip() + " " if line.rstrip().endswith("\\") else line.strip()
        if not line.rstrip().endswith("\\"):
            out.append(current)
            current = ""
    return out


def test_requirements_follow_pyproject_and_leave_torch_to_the_base():
    reqs = requirements(REPO, ["train", "data"])
    names = [re.split(r"[<>=\[ ;]", r)[0].lower() for r in reqs]
    assert {"pydantic", "pyyaml", "jinja2", "click", "numpy", "tokenizers"} <= set(names)
    assert "torch" not in names and "megatron-core" not in names  # base / own layer
    assert len(names) == len(set(names))
    assert requirements(REPO, []) == requirements(REPO, [])[:4] and len(requirements(REPO, [])) == 4
    with pytest.raises(RecipeError, match="'gpu' is not an extra of mtk; valid: train"):
        requirements(REPO, ["gpu"])


def test_switches_become_build_arg_defaults_and_base_can_be_overridden():
    default = make_recipe(job(), REPO)
    assert "ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.09-py3\nFROM ${BASE_IMAGE}\n" in default.dockerfile
    assert "ARG INSTALL_EFA=1\n" in default.dockerfile and "ARG MEGATRON_CORE_VERSION=0.19.2\n" in default.dockerfile
    off = make_recipe(job("image.efa=false", "image.gdrcopy=false", "image.ofi_nccl=never", "image.nccl_tests=false",
                          "image.dcgm=false",
                          "image.megatron_core_version=null", "image.nccl_net_plugin=null"), REPO, base="local:py")
    text = off.dockerfile
    assert "ARG BASE_IMAGE=local:py\n" in text
    for line in ("ARG INSTALL_EFA=0", "ARG INSTALL_GDRCOPY=0", "ARG OFI_NCCL=never", "ARG MEGATRON_CORE_VERSION=",
                 "ARG INSTALL_NCCL_TESTS=0", "ARG INSTALL_DCGM=0"):
        assert f"\n{line}\n" in text
    assert "NCCL_NET_PLUGIN" not in text and "ENV NCCL_NET_PLUGIN=ofi" in default.dockerfile
    assert "--skip-kmod --skip-limit-conf --no-verify" in text  # the step stays, switched off by its arg
    assert {"INSTALL_EFA", "INSTALL_GDRCOPY", "OFI_NCCL", "MEGATRON_CORE_VERSION", "BASE_IMAGE",
            "INSTALL_NCCL_TESTS", "INSTALL_DCGM"} <= declared_args(text)
    for line in ("ARG INSTALL_NCCL_TESTS=1", "ARG NCCL_TESTS_VERSION=v2.17.9", "ARG INSTALL_DCGM=1"):
        assert f"\n{line}\n" in default.dockerfile


def test_layer_order_puts_the_wheel_last():
    rec = make_recipe(job(), REPO)
    steps = instructions(rec.dockerfile)
    index = {name: next(i for i, s in enumerate(steps) if s.startswith(name)) for name in (
        "FROM", "RUN set -eu; if [ \"$INSTALL_EFA\"", "RUN set -eu; if [ -z \"$MEGATRON", "COPY requirements.txt",
        f"COPY {rec.wheel_name}", "ENTRYPOINT")}
    assert list(index.values()) == sorted(index.values())
    assert steps[-2:] == ['ENTRYPOINT ["mtk-entrypoint"]', 'CMD ["--help"]']
    assert rec.wheel_name == wheel_name(REPO) and rec.wheel_name.endswith("-py3-none-any.whl")


def test_every_run_step_is_valid_posix_sh(tmp_path):
    """shellcheck each RUN body with the ARGs defined, as /bin/sh runs it."""
    assert shutil.which("shellcheck"), "shellcheck is missing: apt-get install shellcheck"
    rec = make_recipe(job(), REPO)
    steps = instructions(rec.dockerfile)
    args = [s.split(None, 1)[1] for s in steps if s.startswith("ARG ")]
    runs = [s[4:] for s in steps if s.startswith("RUN ")]
    assert len(runs) >= 6
    for i, body in enumerate(runs):
        script = tmp_path / f"run{i}.sh"
        exports = "".join(f"export {a.split('=')[0]}='{a.partition('=')[2]}'\n" for a in args)
        script.write_text(f"#!/bin/sh\n{exports}{body}\n")
        proc = subprocess.run(["shellcheck", "-s", "sh", "-S", "warning", str(script)], capture_output=True,
                              text=True)
        assert proc.returncode == 0, f"RUN step {i}:\n{body}\n{proc.stdout}"


def test_content_hash_tracks_every_input():
    rec = make_recipe(job(), REPO)
    base = rec.content_hash("w1")
    assert base == make_recipe(job(), REPO).content_hash("w1")
    assert base != rec.content_hash("w2")
    assert base != make_recipe(job(), REPO, build_args={"INSTALL_EFA": "0"}).content_hash("w1")
    assert base != make_recipe(job(), REPO, base="other:1").content_hash("w1")


def test_bad_inputs_name_the_fix(tmp_path):
    with pytest.raises(RecipeError, match=r"not an mtk source checkout.*--source"):
        find_source(tmp_path)
    with pytest.raises(RecipeError, match="not an image reference"):
        make_recipe(job(), REPO, base="bad base")
    with pytest.raises(SpecError, match=r"image\.tag"):
        job("image.tag=-bad")
    with pytest.raises(SpecError, match=r"image\.name"):
        job("image.name=Upper/Case")
    with pytest.raises(SpecError, match=r"image\.efa_installer_version"):
        job("image.efa_installer_version=1.0; rm -rf /")


def test_efa_installer_is_verified_against_aws_signing_key_before_it_runs():
    text = make_recipe(job(), REPO).dockerfile
    assert "ARG EFA_GPG_FINGERPRINT=4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC\n" in text
    efa = text[text.index("ARG INSTALL_EFA="):text.index("ARG INSTALL_GDRCOPY=")]
    verify, run = efa.index("gpg --batch --verify"), efa.index("./efa_installer.sh")
    assert efa.index('fpr:::::::::${EFA_GPG_FINGERPRINT}:') < verify < efa.index('tar -xf "aws-efa') < run


def test_preflight_tools_land_on_path_and_the_tuner_where_netenv_points():
    from mtk.netenv import TUNER_PLUGIN

    text = make_recipe(job(), REPO).dockerfile
    assert "ln -sf /opt/nccl-tests/build/all_reduce_perf /usr/local/bin/all_reduce_perf" in text
    assert 'datacenter-gpu-manager-4-cuda${cuda_major}' in text and "command -v dcgmi" in text
    assert f"tuner={TUNER_PLUGIN};" in text
