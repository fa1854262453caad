"""``image``: the training container, built by ``mtk build-image``."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from .base import Section

_VERSION = re.compile(r"^[A-Za-z0-9._+-]+$")
_EXTRA = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_REPO = re.compile(r"^[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class ImageSpec(Section):
    """One image per job spec; Slurm runs its .sqsh, EKS pulls it from the registry.

    The install switches (efa, gdrcopy, ofi_nccl, megatron_core_version) become build args of the rendered
    Dockerfile, so an offline CPU build can turn them off with ``--build-arg`` without a second Dockerfile.
    """

    base: str = Field("nvcr.io/nvidia/pytorch:25.09-py3", description="NGC PyTorch base image.")
    name: str = Field("mtk-megatron", description="Repository name (ECR repository, local tag).")
    tag: str = Field("latest", description="Image tag; build-image also tags a content hash.")
    registry: str | None = Field(
        None, description="e.g. 123456789012.dkr.ecr.us-west-2.amazonaws.com; None = local only.")
    region: str | None = Field(None, description="AWS region for ECR (default: from the registry host or AWS config).")
    sqsh: str | None = Field(None, description="Path of the enroot .sqsh that Slurm/Pyxis runs.")
    sif: str | None = Field(None, description="Path of an Apptainer .sif.")
    efa: bool = Field(True, description="Run the EFA installer (build arg INSTALL_EFA).")
    efa_installer_version: str = "1.43.2"
    gdrcopy: bool = Field(True, description="Build the GDRCopy user library (build arg INSTALL_GDRCOPY).")
    gdrcopy_version: str = "v2.5.1"
    ofi_nccl: Literal["auto", "always", "never"] = Field(
        "auto", description="Build aws-ofi-nccl: auto = only when the base has no working plugin (build arg OFI_NCCL).")
    aws_ofi_nccl_version: str = "v1.16.3"
    nccl_tests: bool = Field(True, description="Build nccl-tests' all_reduce_perf, which the preflight runs on every "
                             "GPU node (build arg INSTALL_NCCL_TESTS).")
    nccl_tests_version: str = Field("v2.17.9", description="nccl-tests tag (AWS's nccl-tests image uses v2.17.9).")
    dcgm: bool = Field(True, description="Install DCGM (dcgmi diag in the preflight) from NVIDIA's CUDA apt "
                       "repository (build arg INSTALL_DCGM).")
    nccl_net_plugin: str | None = Field(
        "ofi", description="NCCL_NET_PLUGIN baked into the image (libnccl-net-<name>.so); None = the base's default.")
    megatron_core_version: str | None = Field(
        "0.19.2", description="Pinned megatron-core; None = the base already has it (build arg MEGATRON_CORE_VERSION).")
    extras: list[str] = Field(["train", "data"], description="mtk extras whose dependencies the image installs "
                              "(torch excepted: the base brings its own CUDA build).")
    build_args: dict[str, str] = Field(default_factory=dict, description="Extra docker build args.")

    @field_validator("efa_installer_version", "gdrcopy_version", "aws_ofi_nccl_version", "megatron_core_version",
                     "nccl_tests_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not _VERSION.match(v):
            raise ValueError("a version may only hold letters, digits and . _ + -")
        return v

    @field_validator("name")
    @classmethod
    def _repo(cls, v: str) -> str:
        if not _REPO.match(v):
            raise ValueError("a repository name is lowercase letters, digits, '.', '_', '-' and '/' "
                             "(e.g. mtk-megatron)")
        return v

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if not _TAG.match(v):
            raise ValueError("a tag is up to 128 letters, digits, '_', '.', '-', not starting with '.' or '-'")
        return v

    @field_validator("nccl_net_plugin")
    @classmethod
    def _plugin(cls, v: str | None) -> str | None:
        if v is not None and not _EXTRA.match(v):
            raise ValueError("a plugin name is lowercase letters, digits, '_' or '-' (e.g. ofi)")
        return v

    @field_validator("extras")
    @classmethod
    def _extras(cls, v: list[str]) -> list[str]:
        for extra in v:
            if not _EXTRA.match(extra):
                raise ValueError(f"'{extra}' is not an extra name (e.g. train, data)")
        return v

    @property
    def reference(self) -> str:
        """What a node pulls: ``registry/name:tag``, or ``name:tag`` when the image stays local."""
        repo = f"{self.registry.rstrip('/')}/{self.name}" if self.registry else self.name
        return f"{repo}:{self.tag}"
