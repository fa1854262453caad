"""``mtk build-image``: build the training image from the job spec; optionally .sqsh, .sif and push."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .common import job_argument, load, set_option

PASSWORD_ENV = "MTK_REGISTRY_PASSWORD"


def _build_args(values: tuple[str, ...]) -> dict[str, str]:
    from mtk.exitcodes import BadInput

    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"--build-arg {item}: expected NAME=VALUE (an empty VALUE is allowed: NAME=)")
        out[key] = value
    return out


@click.command("build-image")
@job_argument
@set_option
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Build dir for the context, build.json and .def [default: build/mtk-image/<job name>].")
@click.option("--source", type=click.Path(file_okay=False, exists=True), default=None,
              help="mtk checkout to build the wheel from [default: the one this mtk runs from].")
@click.option("--base-image", default=None, help="Override image.base (e.g. a locally imported image).")
@click.option("--build-arg", "build_args", multiple=True, metavar="NAME=VALUE",
              help="Docker build arg, e.g. INSTALL_EFA=0 (repeatable; adds to image.build_args).")
@click.option("--network", default=None, help="Network for RUN steps (docker build --network), e.g. host, none.")
@click.option("--pull", is_flag=True, help="Always try to pull a newer base image.")
@click.option("--no-cache", is_flag=True, help="Rebuild every layer.")
@click.option("--quiet", "-q", is_flag=True, help="Only step lines, not the output of each step.")
@click.option("--dry-run", is_flag=True, help="Write the Dockerfile and context listing; build nothing.")
@click.option("--sqsh", is_flag=False, flag_value="", default=None, metavar="[PATH]",
              help="Also write an enroot .sqsh for Pyxis (PATH defaults to image.sqsh).")
@click.option("--sif", is_flag=False, flag_value="", default=None, metavar="[PATH]",
              help="Also write an Apptainer definition and build PATH when apptainer exists (default image.sif).")
@click.option("--force", is_flag=True, help="Redo the .sqsh even if it is newer than the image.")
@click.option("--push", is_flag=True, help="Push to image.registry (ECR: repository created, token via boto3).")
@click.option("--registry", default=None, help="Push to this registry instead of image.registry.")
@click.option("--registry-host", default=None, metavar="HOST[:PORT]",
              help="Send the push to this host (a private registry or mirror reached under another name) while "
                   "the image keeps image.registry's name and credentials.")
@click.option("--ecr-endpoint", default=None, metavar="URL",
              help="ECR API endpoint (e.g. an ECR interface VPC endpoint); also MTK_ECR_ENDPOINT or "
                   "AWS_ENDPOINT_URL_ECR.")
@click.option("--username", default=None, help="Registry user for a non-ECR registry.")
@click.option("--password-stdin", is_flag=True,
              help=f"Read the registry password from stdin (or set {PASSWORD_ENV}); never pass it as an argument.")
def command(job_file, overrides, out, source, base_image, build_args, network, pull, no_cache, quiet, dry_run,
            sqsh, sif, force, push, registry, registry_host, ecr_endpoint, username, password_stdin):
    """Build the training image for JOB.yaml (NGC base, EFA, megatron-core, mtk wheel)."""
    from mtk.containers.pipeline import Options, run

    job = load(job_file, overrides, None)
    password = None
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif username:
        password = os.environ.get(PASSWORD_ENV)
    opts = Options(out=Path(out) if out else Path("build") / "mtk-image" / job.name, source=Path(source) if source
                   else None, base_image=base_image, build_args=_build_args(build_args), network=network, pull=pull,
                   no_cache=no_cache, verbose=not quiet, dry_run=dry_run, sqsh=sqsh, sif=sif, force=force, push=push,
                   registry=registry, registry_host=registry_host, ecr_endpoint=ecr_endpoint, username=username,
                   password=password)
    report = run(job, opts, click.echo)  # a failed build, push, .sqsh or .sif: its error names it (UserFacingError)
    if not dry_run:
        click.echo(f"image: {report.tags[0]} ({report.image_id[:19]})")
        if report.sqsh:
            click.echo(f"sqsh: {report.sqsh}")
        for ref in report.pushed:
            click.echo(f"pushed: {ref}")

