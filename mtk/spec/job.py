"""The job spec: the one typed description of a run that every backend and the entrypoint read."""

from __future__ import annotations

from pydantic import Field

from mtk.steps import PIPELINE, Step

from .base import Section
from .cluster import ClusterSpec
from .data import DataSpec
from .debug import DebugSpec
from .image import ImageSpec
from .model import ModelSpec
from .parallel import ParallelSpec
from .resilience import ResilienceSpec
from .train import TrainSpec

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"


class Job(Section):
    """Everything a run needs. Load with :func:`mtk.spec.load_job`, which also runs the checks."""

    name: str = Field(..., pattern=NAME_PATTERN,
                      description="Run name: lowercase letters, digits and '-', ≤ 40 chars (it names k8s objects).")
    image: ImageSpec = Field(default_factory=ImageSpec)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    model: ModelSpec
    parallel: ParallelSpec = Field(default_factory=ParallelSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    debug: DebugSpec = Field(default_factory=DebugSpec)
    resilience: ResilienceSpec = Field(default_factory=ResilienceSpec)

    def steps(self) -> list[Step]:
        """The pipeline steps this spec needs, in order (each equals its name: ``"getdata"``, ...): those whose
        switch field the spec sets (``Step.needed_when``)."""
        return [step for step in PIPELINE if step.needed_by(self)]

    def to_json(self) -> str:
        """Canonical serialisation: what travels with the run (run dir, ConfigMap, image)."""
        return self.model_dump_json(indent=2, exclude_none=False) + "\n"
