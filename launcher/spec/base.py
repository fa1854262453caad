"""The base model every spec section derives from: unknown keys are errors, not silently dropped."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A spec section. ``extra='forbid'`` turns a typo into an error that names the key."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
