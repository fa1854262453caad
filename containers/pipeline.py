"""``mtk build-image`` end to end: recipe -> context -> docker build -> .sqsh / .sif / push.

Every output path the spec names (``image.sqsh``, ``image.sif``) is honoured, so what ``mtk launch`` later
renders runs exactly the file built here (the AWS sample's .sqsh names did not match).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mtk.exitcodes import BadInput
from mtk.files import atomic_write

from . import apptainer, context, recipe

if TYPE_CHECKING:
    from mtk.spec import Job

Echo = Callable[[str], None]
HASH_PREFIX = "sha-"
ECR_ENDPOINT_ENV = "MTK_ECR_ENDPOINT"


class ImageError(BadInput, RuntimeError):
    """Options of build-image that do not fit together or with the spec (the message says what to do): exit 2."""


@dataclass
class Options:
    out: Path
    source: Path | None = None
    base_image: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    network: str | None = None
    pull: bool = False
    no_cache: bool = False
    verbose: bool = True
    dry_run: bool = False
    sqsh: str | None = None  # "" = use image.sqsh
    sif: str | None = None  # "" = use image.sif
    force: bool = False
    push: bool = False
    registry: str | None = None
    registry_host: str | None = None
    ecr_endpoint: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


@dataclass
class Report:
    tags: list[str]
    content_hash: str = ""
    image_id: str = ""
    cached_steps: list[int] = field(default_factory=list)
    sqsh: str | None = None
    sif_definition: str | None = None
    pushed: list[str] = field(default_factory=list)


def output_path(flag: str | None, spec_value: str | None, field_name: str, tool: str, echo: Echo) -> Path | None:
    """Resolve ``--sqsh``/``--sif`` against the spec so that build and launch agree on one path."""
    if flag is None:
        return None
    if flag == "":
        if not spec_value:
            raise ImageError(f"--{tool} needs a PATH, or set {field_name} in the job spec")
        return Path(spec_value)
    if spec_value and Path(spec_value).absolute() != Path(flag).absolute():
        raise ImageError(f"--{tool} {flag} differs from {field_name} ({spec_value}), which is what `mtk launch` "
                         f"will run; pass --{tool} without PATH, or --set {field_name}={flag}")
    if not spec_value:
        echo(f"note: set {field_name}: {flag} in the job spec (or --set {field_name}={flag} at launch) so the "
             "launcher runs this file")
    return Path(flag)


def tags_for(job: Job, content_hash: str | None) -> list[str]:
    name = job.image.name
    tags = [f"{name}:{job.image.tag}"]
    if content_hash:
        tags.append(f"{name}:{HASH_PREFIX}{content_hash[:12]}")
    return tags


def _check_build_args(rec: recipe.Recipe) -> None:
    unknown = sorted(set(rec.build_args) - recipe.declared_args(rec.dockerfile))
    if unknown:
        raise ImageError(f"build arg(s) {', '.join(unknown)} are not declared in the Dockerfile; valid: "
                         f"{', '.join(sorted(recipe.declared_args(rec.dockerfile)))}")


def _write_plan(out: Path, plan: dict) -> None:
    atomic_write(out / "build.json", json.dumps(plan, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Plan:
    """What this invocation will produce, resolved from the spec and the options before anything runs."""

    recipe: recipe.Recipe
    source: Path
    out: Path
    sqsh: Path | None
    sif: Path | None
    registry: str | None

    @property
    def context_dir(self) -> Path:
        return self.out / "context"


def plan(job: Job, opts: Options, echo: Echo) -> Plan:
    """Resolve paths, render the recipe and check every option; raises ImageError (or RecipeError) naming the
    fix."""
    sqsh = output_path(opts.sqsh, job.image.sqsh, "image.sqsh", "sqsh", echo)
    sif = output_path(opts.sif, job.image.sif, "image.sif", "sif", echo)
    override = job.cluster.slurm.container_image
    if sqsh is not None and override and Path(override).absolute() != sqsh.absolute():
        echo(f"note: cluster.slurm.container_image ({override}) overrides image.sqsh in the sbatch script; "
             f"unset it to run {sqsh}")
    source = recipe.find_source(opts.source)  # a RecipeError names the checkout or field (bad input)
    rec = recipe.make_recipe(job, source, base=opts.base_image, build_args=opts.build_args)
    _check_build_args(rec)
    registry = opts.registry or job.image.registry
    if opts.push and not registry:
        raise ImageError("--push needs a registry: set image.registry or pass --registry HOST")
    return Plan(rec, source, opts.out.absolute(), sqsh, sif, registry)


def run(job: Job, opts: Options, echo: Echo) -> Report:
    """Do everything ``opts`` asks for; with ``dry_run`` only files under ``opts.out`` are written."""
    p = plan(job, opts, echo)
    if opts.dry_run:
        return dry_run(job, opts, p, echo)
    from .build import docker_client, run_build

    client = docker_client()  # fail fast, before the wheel build, when no daemon answers
    echo(f"wheel: building mtk from {p.source}")
    wheel = context.build_wheel(p.source, p.out / "wheel")
    ctx = context.write_context(p.recipe, p.context_dir, wheel)
    atomic_write(p.out / "context.txt", ctx.listing())
    digest = p.recipe.content_hash(ctx.files[p.recipe.wheel_name])
    report = Report(tags=tags_for(job, digest), content_hash=digest)
    import mtk

    labels = {"org.opencontainers.image.title": job.image.name, "org.opencontainers.image.version": mtk.__version__,
              "mtk.content-hash": digest, "mtk.job": job.name}
    echo(f"build: {p.recipe.base} -> {', '.join(report.tags)}")
    result = run_build(client, p.context_dir, report.tags, p.recipe.build_args, labels, echo, network=opts.network,
                       pull=opts.pull, no_cache=opts.no_cache, verbose=opts.verbose)
    report.image_id, report.cached_steps = result.image_id, result.cached_steps
    echo(f"build: {result.image_id[:19]} tagged {', '.join(report.tags)} "
         f"({len(result.cached_steps)}/{len(result.steps)} steps cached)")
    _write_plan(p.out, {"dry_run": False, "base": p.recipe.base, "build_args": p.recipe.build_args,
                        "tags": report.tags, "content_hash": digest, "image_id": result.image_id,
                        "source": str(p.source),
                        "steps": [{k: v for k, v in asdict(s).items() if k != "output"} for s in result.steps]})
    if p.sqsh is not None:
        from .enroot import make_sqsh

        make_sqsh(client, report.tags[0], p.sqsh, echo, force=opts.force)
        report.sqsh = str(p.sqsh.absolute())
    if p.sif is not None:
        definition = _write_definition(p, job)
        report.sif_definition = str(definition)
        apptainer.build_sif(definition, p.sif, echo)
    if opts.push:
        report.pushed = _push(client, job, opts, p.registry or "", report, echo)
    return report


def dry_run(job: Job, opts: Options, p: Plan, echo: Echo) -> Report:
    """Write the Dockerfile, requirements, context listing and build.json (and the .def); run nothing."""
    ctx = context.write_context(p.recipe, p.context_dir, wheel=None)
    atomic_write(p.out / "context.txt", ctx.listing())
    report = Report(tags=[*tags_for(job, None), f"{job.image.name}:{HASH_PREFIX}<content hash>"])
    if p.sif is not None:
        report.sif_definition = str(_write_definition(p, job))
    _write_plan(p.out, {"dry_run": True, "base": p.recipe.base, "build_args": p.recipe.build_args,
                        "tags": report.tags, "source": str(p.source), "sqsh": str(p.sqsh) if p.sqsh else None,
                        "sif": str(p.sif) if p.sif else None, "push_to": p.registry if opts.push else None})
    echo(f"dry run: wrote {p.context_dir / 'Dockerfile'}, {p.context_dir / 'requirements.txt'}, "
         f"{p.out / 'context.txt'}, {p.out / 'build.json'}")
    echo(ctx.listing().rstrip())
    argv = ["docker", "build", "--network", opts.network] if opts.network else ["docker", "build"]
    for k, v in p.recipe.build_args.items():
        argv += ["--build-arg", f"{k}={v}"]
    echo("would build (with the Docker SDK, like): " + shlex.join([*argv, "-t", report.tags[0], str(p.context_dir)]))
    return report


def _write_definition(p: Plan, job: Job) -> Path:
    path = p.out / f"{job.image.name.replace('/', '_')}.def"
    atomic_write(path, apptainer.definition(p.recipe.dockerfile, p.context_dir, p.recipe.build_args))
    return path


def _push(client, job: Job, opts: Options, registry: str, report: Report, echo: Echo) -> list[str]:
    from .registry import Credentials, ecr_login, parse_ecr, push

    host = opts.registry_host or registry
    repository = f"{host.rstrip('/')}/{job.image.name}"
    if parse_ecr(registry):
        endpoint = opts.ecr_endpoint or os.environ.get(ECR_ENDPOINT_ENV)
        creds = ecr_login(registry, job.image.name, job.image.region, endpoint, echo)
    elif opts.username:
        if opts.password is None:
            raise ImageError("--username needs the password on stdin (--password-stdin)")
        creds = Credentials(opts.username, opts.password)
    else:
        creds = None  # the daemon/SDK's stored credentials (docker login), or an open registry
    tags = [t.rpartition(":")[2] for t in report.tags]
    refs = push(client, report.image_id, repository, tags, echo, creds)
    if opts.registry_host:
        echo(f"note: pushed to {host} (--registry-host); nodes pull {registry}/{job.image.name}:{job.image.tag}")
    return refs
