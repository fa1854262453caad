"""``cluster``: resources shared by every backend, this machine's block (``local``), and each backend's own.

Neutral fields (nodes, processes per node, device, env) live here. A backend's block (``cluster.slurm``,
``cluster.eks``, a plugin's ``cluster.<name>``) is that backend's model, found through the registry
(``mtk.backend_registry.options_model``) and validated here with its errors under ``cluster.<name>``: the core
names none of their fields, and a plugin backend brings its block with it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from ..exclusions import NODE_NAME
from .base import Section

if TYPE_CHECKING:  # what the built-in backends' blocks are, for the type checker (at run time: the registry's)
    from pydantic import ModelWrapValidatorHandler

    from mtk.k8s.options import EksOptions
    from mtk.slurm.options import SlurmOptions

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LocalSpec(Section):
    """This machine alone, no scheduler (the local backend, and torchrun's standalone rendezvous that the core
    picks on any node outside a scheduler)."""

    rdzv_port: int | None = Field(None, ge=1024, le=65535, description="torchrun master port (default: a free one).")


_K8S_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class SecretRef(Section):
    """A secret by reference. The value comes from the launching shell (Slurm, local) or a Kubernetes Secret
    (EKS) and reaches every process as the environment variable ``name``; no file, argv or log holds it."""

    name: str = Field(..., description="Environment variable the processes read, e.g. HF_TOKEN.")
    k8s_secret: str | None = Field(None, description="EKS: Kubernetes Secret holding it (default: <job name>-secrets).")
    key: str | None = Field(None, description="EKS: key inside that Secret (default: name).")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v):
        return {"name": v} if isinstance(v, str) else v

    @field_validator("name")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if not _ENV_NAME.match(v):
            raise ValueError(f"'{v}' is not a valid environment variable name (letters, digits, _)")
        return v

    @field_validator("k8s_secret")
    @classmethod
    def _secret_name(cls, v: str | None) -> str | None:
        if v is not None and not _K8S_NAME.match(v):
            raise ValueError("a Kubernetes Secret name: lowercase letters, digits, '-' and '.', ≤ 253 chars")
        return v

    @field_validator("key")
    @classmethod
    def _secret_key(cls, v: str | None) -> str | None:
        if v is not None and not _K8S_KEY.match(v):
            raise ValueError("a Secret key: letters, digits, '-', '_' and '.'")
        return v

    def secret_name(self, job_name: str) -> str:
        return self.k8s_secret or f"{job_name}-secrets"


class ClusterSpec(Section):
    """Resources, shared for all backends, then one block per backend that has options (its own model's)."""

    # Keys beyond the fields below are backend blocks, each validated by its backend's model (_backend_blocks);
    # any other key is refused as unknown, as in every section.
    model_config = ConfigDict(**{**Section.model_config, "extra": "allow"})

    nodes: int = Field(1, ge=1, description="Nodes (Slurm) or worker pods (EKS). On Slurm 'MIN:MAX' (e.g. '8:10') "
                                            "asks for spare nodes: the job takes up to MAX, drops those that fail the "
                                            "preflight and trains on what is healthy if that is at least MIN.")
    min_nodes: int | None = Field(None, ge=1, description="Set by nodes: 'MIN:MAX' (Slurm spare nodes); nodes is then "
                                                          "MAX. The world size is the healthy node count × "
                                                          "procs_per_node; the global batch stays fixed.")
    procs_per_node: int = Field(8, ge=1, description="Training processes per node (= GPUs per node on GPU).")
    device: Literal["gpu", "cpu"] = Field("gpu", description="cpu runs the same code with gloo (CI, laptops).")
    instance_type: str | None = Field(None, description="e.g. p5.48xlarge: selects NCCL/EFA settings and EFA count.")
    efa_per_node: int | None = Field(None, ge=0, description="EFA devices per node (default: from instance_type).")
    gpu_memory_gib: float | None = Field(
        None, gt=0, description="Memory of one GPU in GiB, for validate's fit check of the per-GPU estimate (default: "
        "from instance_type, e.g. p5: 79.6, p4d: 40, p5e/p5en: 140.4; unknown without either: not checked).")
    allow_memory_overcommit: bool = Field(
        False, description="Accept a spec whose per-GPU memory estimate exceeds the GPU's memory (validate refuses it "
        "otherwise): for a layout the estimate over-counts, e.g. CPU offloading.")
    runs_dir: str = Field("runs", description="Where run dirs go; must be shared storage on clusters.")
    mtbf_hours: float | None = Field(
        None, gt=0, description="Mean hours between unexpected interruptions of one node, for the checkpoint "
        "interval and goodput that validate/launch print (mtk/goodput.py). Default: Llama 3's 419 interruptions in "
        "54 days on 16,384 GPUs (2,048 nodes of 8), ~6,300 h per node.")
    pg_timeout_s: int = Field(
        600, ge=60, le=30 * 24 * 3600, description="torch.distributed timeout (s, at most 30 days) for every process "
        "group: how long a rank waits "
        "in a collective (e.g. while rank 0 builds data indices or writes a checkpoint) before failing.")
    exclude_nodes: list[str] = Field(
        default_factory=list, description="Nodes never to run on (Slurm --exclude; EKS node anti-affinity), e.g. "
                                          "the hosts a hang or failed preflight named (state/excluded_nodes)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment for every process (overrides presets)."
    )
    secrets: list[SecretRef] = Field(
        default_factory=list,
        description="Credentials by reference (HF_TOKEN, WANDB_API_KEY, ...): names of variables taken from the "
        "launching environment (EKS: a Kubernetes Secret); their values are never written anywhere.",
    )
    local: LocalSpec = Field(default_factory=LocalSpec)
    if TYPE_CHECKING:  # at run time these are extra attributes, set by _backend_blocks

        @property
        def slurm(self) -> SlurmOptions: ...

        @property
        def eks(self) -> EksOptions: ...

    @model_validator(mode="wrap")
    @classmethod
    def _backend_blocks(cls, data: Any, handler: ModelWrapValidatorHandler[ClusterSpec]) -> ClusterSpec:
        """Each key that is not a field names a backend whose model validates its block (errors under
        ``cluster.<name>``); a built-in backend's block is always there (its defaults when not given)."""
        if not isinstance(data, dict):
            return handler(data)
        from mtk.backend_registry import OPTIONS, options_model

        fields = {key: value for key, value in data.items() if key in cls.model_fields}
        blocks: dict[str, Section] = {}
        errors: list[Any] = []
        for name in [*OPTIONS, *(key for key in data if key not in cls.model_fields and key not in OPTIONS)]:
            model = options_model(name)
            if model is None:
                errors.append({"type": "extra_forbidden", "loc": (name,), "input": data[name]})
                continue
            try:
                blocks[name] = model.model_validate(data.get(name, {}))
            except ValidationError as exc:
                errors += [{**err, "loc": (name, *err["loc"])} for err in exc.errors()]
        try:
            cluster = handler({**fields, **blocks})
        except ValidationError as exc:  # every problem at once: the fields' first, as they are declared
            errors = [*exc.errors(), *errors]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return cluster

    @classmethod
    def block_model(cls, name: str) -> type[Section] | None:
        """The model of backend ``name``'s block, ``cluster.<name>`` (None: no backend by that name takes options)."""
        from mtk.backend_registry import options_model

        return None if name in cls.model_fields else options_model(name)

    def block(self, name: str) -> Section | None:
        """Backend ``name``'s block: as the spec gave it, else its model's defaults (None: it takes no options).
        A plugin backend reads its options this way (a built-in's are always present as attributes)."""
        given = (self.model_extra or {}).get(name)
        if given is not None:
            return given
        model = self.block_model(name)
        return model() if model is not None else None

    @classmethod
    def accepted_keys(cls) -> list[str]:
        """Every key the section takes: its fields, then the built-in backends' blocks."""
        from mtk.backend_registry import OPTIONS

        return [*cls.model_fields, *OPTIONS]

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _ENV_NAME.match(name):
                raise ValueError(f"'{name}' is not a valid environment variable name (letters, digits, _)")
        return v

    @model_validator(mode="before")
    @classmethod
    def _node_range(cls, data):
        """``nodes: "MIN:MAX"`` → nodes = MAX, min_nodes = MIN."""
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), str):
            return data
        text = data["nodes"].strip()
        if text.isdigit():
            return {**data, "nodes": int(text)}
        m = re.fullmatch(r"(\d+)\s*:\s*(\d+)", text)
        if m is None:
            raise ValueError(f"nodes {text!r}: write a node count (8) or a spare-node range MIN:MAX (8:10)")
        if data.get("min_nodes") is not None:
            raise ValueError(f"nodes {text!r} already sets min_nodes; drop min_nodes ({data['min_nodes']!r})")
        return {**data, "nodes": int(m.group(2)), "min_nodes": int(m.group(1))}

    @field_validator("exclude_nodes")
    @classmethod
    def _node_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not NODE_NAME.match(name):
                raise ValueError(f"'{name}' is not a node name (letters, digits, '.', '-', '_')")
        return v

    @property
    def secret_names(self) -> list[str]:
        return [s.name for s in self.secrets]

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def node_counts(self) -> range:
        """Every node count the job may train on: just ``nodes``, or MIN..MAX with spare nodes."""
        return range(self.min_nodes or self.nodes, self.nodes + 1)
