"""The job spec: typed sections, presets, loading with ``--set`` overrides, and pre-flight checks."""

from .errors import Problem, SpecError
from .job import Job
from .loader import apply_overrides, load_job, load_job_json, read_yaml, validate

__all__ = ["Job", "Problem", "SpecError", "apply_overrides", "load_job", "load_job_json", "read_yaml", "validate"]
