"""The base model every spec section derives from: unknown keys are errors, not silently dropped,
``true``/``false`` is not a number (pydantic's lax mode would read ``tp: true`` as 1), ``.inf``/``.nan`` are
not numbers either, and no integer leaves int64 (what torch, numpy and Megatron-LM's arguments hold: a larger
count would pass validation and overflow on the nodes)."""

import types
import typing

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

_NUMBERS = {int, float}
INT64_MAX = 2**63 - 1


def _members(annotation: object) -> set:
    """The types a field accepts, Optional/Union flattened."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return {m for a in typing.get_args(annotation) for m in _members(a)}
    return {annotation}


def _numeric(annotation: object) -> bool:
    members = _members(annotation) - {type(None)}
    return bool(members) and members <= _NUMBERS


def _numeric_list(annotation: object) -> bool:
    return typing.get_origin(annotation) in (list, tuple) and all(
        _numeric(a) for a in typing.get_args(annotation) if a is not Ellipsis)


class Section(BaseModel):
    """A spec section. ``extra='forbid'`` turns a typo into an error that names the key."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)

    @classmethod
    def accepted_keys(cls) -> list[str]:
        """Every key this section takes: what an unknown key's error lists."""
        return list(cls.model_fields)

    @field_validator("*", mode="before")
    @classmethod
    def _bool_is_not_a_number(cls, value: object, info: ValidationInfo) -> object:
        field = cls.model_fields.get(info.field_name or "")
        if field is None:
            return value
        if isinstance(value, bool) and _numeric(field.annotation):
            raise ValueError(f"expects a number, not {str(value).lower()}; write the number (e.g. 1)")
        if isinstance(value, list) and _numeric_list(field.annotation) and any(isinstance(v, bool) for v in value):
            raise ValueError("expects numbers, not true/false")
        ints = [value] if _numeric(field.annotation) else value if _numeric_list(field.annotation) else []
        if isinstance(ints, list) and any(isinstance(v, int) and not -INT64_MAX - 1 <= v <= INT64_MAX for v in ints):
            raise ValueError(f"out of range: numbers here must fit in 64 bits (at most {INT64_MAX:,}); "
                             "write a realistic value")
        return value
