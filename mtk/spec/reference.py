"""The spec's reference, made from the models themselves: every field with its type, default and description,
as Markdown (``docs/spec.md``) and as a JSON schema an editor can check a ``mtk.yaml`` against (``mtk schema``).

Written from the pydantic models so that it cannot drift: a field added with its ``description`` is documented by
``python -m mtk.spec.reference docs/spec.md``, and a test keeps the committed page equal to what this makes. The
built-in backends' own blocks (``cluster.slurm``, ``cluster.eks``: models the backends own, validated by the core
through ``mtk.backends.OPTIONS``) are documented under ``cluster`` as the spec loader accepts them.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .job import Job

HEADER = """# The job spec, field by field

Generated from mtk's models by `python -m mtk.spec.reference docs/spec.md` (a test keeps this page equal to
them); `mtk schema` prints the same as a JSON schema for editors (YAML language servers read it through a
`# yaml-language-server: $schema=...` line). Every key is checked: an unknown one is an error that names it.
"""


def _sections(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The sub-models of ``model`` by field name, the backends' blocks included for ``cluster``."""
    out = {name: sub for name, field in model.model_fields.items() if (sub := _model_of(field.annotation))}
    if model.__name__ == "ClusterSpec":
        from mtk.backend_registry import OPTIONS, options_model

        out.update({name: block for name in OPTIONS if (block := options_model(name)) is not None})
    return out


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (also inside Optional / list), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        found = [m for a in typing.get_args(annotation) if (m := _model_of(a))]
        return found[0] if len(found) == 1 else None
    return None


def _type_name(annotation: Any) -> str:
    text = repr(annotation) if not isinstance(annotation, type) else annotation.__name__
    for noise in ("typing.", "mtk.spec.", "pydantic.types."):
        text = text.replace(noise, "")
    return text.replace("NoneType", "null")


def _default(model: type[BaseModel], field: FieldInfo) -> str:
    if field.is_required():
        return "required without `preset`" if "preset" in model.model_fields else "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        return "(section)" if isinstance(value, BaseModel) else f"`{json.dumps(value, default=str)}`"
    if field.default is PydanticUndefined:
        return ""
    return f"`{json.dumps(field.default, default=str)}`"


def _first_line(model: type[BaseModel]) -> str:
    """The docstring's first paragraph: what the section is for."""
    return (model.__doc__ or "").strip().split("\n\n")[0]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown() -> str:
    """The whole reference page."""
    parts = [HEADER]
    queue: list[tuple[str, type[BaseModel]]] = [("", Job)]
    while queue:
        path, model = queue.pop(0)
        subs = _sections(model)
        title = path or "top level"
        doc = _cell(_first_line(model))
        parts.append(f"\n## `{title}`\n\n{doc}\n\n| key | type | default | what it does |\n| --- | --- | --- | --- |")
        for name, field in model.model_fields.items():
            shown = f"[`{name}`](#{(path + '.' + name if path else name).replace('.', '')})" if name in subs else (
                f"`{name}`")
            what = field.description or (_first_line(subs[name]) if name in subs else "")
            kind, default = _cell(_type_name(field.annotation)), _default(model, field)
            parts.append(f"| {shown} | {kind} | {default} | {_cell(what)} |")
        for name, sub in subs.items():
            if name not in model.model_fields:
                parts.append(f"| [`{name}`](#{(path + '.' + name).replace('.', '')}) | {sub.__name__} | (section) | "
                             f"the {name} backend's own options |")
        queue.extend((f"{path}.{name}" if path else name, sub) for name, sub in subs.items())
    return "\n".join(parts) + "\n"


def json_schema() -> dict[str, Any]:
    """Job's JSON schema with the backends' blocks as properties of ``cluster``."""
    from mtk.backend_registry import OPTIONS, options_model

    schema = Job.model_json_schema()
    defs = schema.setdefault("$defs", {})
    cluster = defs["ClusterSpec"]
    for name in OPTIONS:
        model = options_model(name)
        if model is None:
            continue
        block = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(block.pop("$defs", {}))
        defs[block["title"]] = block
        cluster.setdefault("properties", {})[name] = {"$ref": f"#/$defs/{block['title']}"}
    cluster["additionalProperties"] = False
    sizes = defs["ModelSpec"]  # a preset fills the sizes (ModelSpec._apply_preset): required only without one
    sizes["anyOf"] = [{"required": ["preset"]}, {"required": sizes.pop("required")}]
    schema["title"] = "mtk job spec"
    return schema


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mtk.spec.reference OUT.md", file=sys.stderr)
        return 2
    from pathlib import Path

    from mtk.files import atomic_write

    atomic_write(Path(argv[0]), markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
