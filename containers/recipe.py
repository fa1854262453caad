"""What goes into the image: the rendered Dockerfile, mtk's requirements, and the build args.

Pure functions of the job spec and the source checkout (no docker, no subprocess): ``--dry-run`` is built on
them, and so is the content hash that tags every build.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mtk.exitcodes import BadInput
from mtk.templating import render_template

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]  # the same API under its backport name

if TYPE_CHECKING:
    from mtk.spec import Job
    from mtk.spec.image import ImageSpec

# The base image brings its own CUDA build of torch; pip must never replace it with a PyPI wheel.
BASE_PROVIDED = ("torch",)
# megatron-core has its own pinned layer (image.megatron_core_version), before the fast-changing ones.
OWN_LAYER = ("megatron-core",)
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.M)


class RecipeError(BadInput, ValueError):
    """A problem with the source checkout or the image spec; the message says what to fix (exit 2)."""


@dataclass(frozen=True)
class Recipe:
    """Everything ``docker build`` receives apart from the wheel's bytes."""

    dockerfile: str
    requirements: list[str]
    wheel_name: str
    base: str
    build_args: dict[str, str] = field(default_factory=dict)

    def requirements_text(self) -> str:
        return "".join(f"{r}\n" for r in self.requirements)

    def content_hash(self, wheel_digest: str) -> str:
        """sha256 of what determines the image: Dockerfile, requirements, wheel contents, build args."""
        h = hashlib.sha256()
        for part in (self.dockerfile, self.requirements_text(), wheel_digest,
                     json.dumps(self.build_args, sort_keys=True)):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()


def find_source(start: str | Path | None = None) -> Path:
    """The mtk checkout to build the wheel from: ``start``, else the checkout this module was loaded from."""
    candidates = [Path(start)] if start else [Path(__file__).resolve().parents[1]]
    for root in candidates:
        if (root / "pyproject.toml").is_file() and (root / "mtk" / "__init__.py").is_file():
            return root.resolve()
    where = start or candidates[0]
    raise RecipeError(f"{where} is not an mtk source checkout (needs pyproject.toml and mtk/__init__.py); "
                      "pass --source DIR pointing at the checkout")


def source_version(source: Path) -> str:
    match = _VERSION.search((source / "mtk" / "__init__.py").read_text())
    if not match:
        raise RecipeError(f"{source / 'mtk' / '__init__.py'} has no __version__ = '...' line")
    return match.group(1)


def wheel_name(source: Path) -> str:
    """The wheel ``pip wheel`` produces for this checkout (pure Python: py3-none-any)."""
    return f"mtk-{source_version(source)}-py3-none-any.whl"


def _req_name(req: str) -> str:
    match = _NAME.match(req)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


def requirements(source: Path, extras: list[str]) -> list[str]:
    """mtk's core dependencies plus those of ``extras`` (from pyproject.toml), minus base-provided ones."""
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    out: list[str] = []
    pending, seen = list(extras), set()
    reqs = list(project.get("dependencies", []))
    while pending:
        extra = pending.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise RecipeError(f"image.extras: '{extra}' is not an extra of mtk; valid: {', '.join(optional)}")
        reqs.extend(optional[extra])
    for req in reqs:
        name = _req_name(req)
        if name == "mtk":  # an aggregate extra such as mtk[train,data]
            inner = req[req.index("[") + 1:req.index("]")] if "[" in req else ""
            pending = [e.strip() for e in inner.split(",") if e.strip()]
            out.extend(r for r in requirements(source, pending) if r not in out)
            continue
        if name in BASE_PROVIDED or name in OWN_LAYER or req in out:
            continue
        out.append(req)
    return out


def _switches(image: ImageSpec) -> dict[str, str]:
    """The build-arg defaults the template bakes in, from the spec's install switches."""
    return {
        "install_efa": "1" if image.efa else "0",
        "efa_installer_version": image.efa_installer_version,
        "install_gdrcopy": "1" if image.gdrcopy else "0",
        "gdrcopy_version": image.gdrcopy_version,
        "ofi_nccl": image.ofi_nccl,
        "aws_ofi_nccl_version": image.aws_ofi_nccl_version,
        "install_nccl_tests": "1" if image.nccl_tests else "0",
        "nccl_tests_version": image.nccl_tests_version,
        "install_dcgm": "1" if image.dcgm else "0",
        "nccl_net_plugin": image.nccl_net_plugin or "",
        "megatron_core_version": image.megatron_core_version or "",
    }


def make_recipe(job: Job, source: Path, base: str | None = None,
                build_args: dict[str, str] | None = None) -> Recipe:
    """Render the Dockerfile for ``job.image``; ``base`` overrides the base image (``--base-image``)."""
    image = job.image
    base = base or image.base
    if not base or any(c.isspace() for c in base):
        raise RecipeError(f"--base-image/image.base: '{base}' is not an image reference")
    wheel = wheel_name(source)
    dockerfile = render_template(__file__, "Dockerfile.j2", job_name=job.name, base=base, wheel=wheel,
                                 **_switches(image))
    args = {**image.build_args, **(build_args or {})}
    return Recipe(dockerfile=dockerfile, requirements=requirements(source, image.extras), wheel_name=wheel,
                  base=base, build_args=dict(sorted(args.items())))


def declared_args(dockerfile: str) -> set[str]:
    """ARG names the Dockerfile declares (an unknown --build-arg is a typo, not a silent no-op)."""
    return set(re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", dockerfile, re.M))
