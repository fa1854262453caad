"""``image``: the training container, built by ``mtk build-image``."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class ImageSpec(Section):
    """One image per job spec; Slurm runs its .sqsh, EKS pulls it from the registry."""

    base: str = Field("nvcr.io/nvidia/pytorch:25.09-py3", description="NGC PyTorch base image.")
    name: str = Field("mtk-megatron", description="Repository name (ECR repository, local tag).")
    tag: str = Field("latest", description="Image tag; build-image also tags a content hash.")
    registry: str | None = Field(None, description="e.g. 123456789012.dkr.ecr.us-west-2.amazonaws.com; None = local only.")
    region: str | None = Field(None, description="AWS region for ECR (default: from the registry host or AWS config).")
    sqsh: str | None = Field(None, description="Path of the enroot .sqsh that Slurm/Pyxis runs.")
    sif: str | None = Field(None, description="Path of an Apptainer .sif.")
    efa_installer_version: str = "1.43.2"
    gdrcopy_version: str = "v2.5.1"
    aws_ofi_nccl_version: str = "v1.16.3"
    megatron_core_version: str = "0.19.2"
    build_args: dict[str, str] = Field(default_factory=dict)

    @property
    def reference(self) -> str:
        """What a node pulls: ``registry/name:tag``, or ``name:tag`` when the image stays local."""
        repo = f"{self.registry.rstrip('/')}/{self.name}" if self.registry else self.name
        return f"{repo}:{self.tag}"
