"""``mtk``: the command line. Each verb is its own module, imported only when that verb runs.

``mtk --help`` therefore imports click and this file only (no pydantic, torch, docker, kubernetes, boto3).
"""

from __future__ import annotations

import os
import sys
from typing import cast

import click

from mtk.loading import load

# verb -> (module[:command attribute], one-line help). Only verbs that work are listed.
VERBS: dict[str, tuple[str, str]] = {
    "validate": ("mtk.launcher.cli.validate", "Check a job spec and print the resolved spec and derived figures."),
    "render": ("mtk.launcher.cli.render", "Write the files a backend would submit, without submitting."),
    "launch": ("mtk.launcher.cli.launch", "Render and submit a job (or --dry-run to show what would run)."),
    "ls": ("mtk.launcher.cli.ls", "List the runs under the runs dir, newest first (state, progress, loss)."),
    "status": ("mtk.launcher.cli.status", "Show the state of each step of a run."),
    "logs": ("mtk.launcher.cli.logs", "Print (or follow) a run's logs."),
    "cancel": ("mtk.launcher.cli.cancel", "Cancel every step of a run."),
    "report": ("mtk.launcher.cli.report", "Plot and summarize a run, or compare several on shared axes."),
    "build-image": ("mtk.launcher.cli.build_image", "Build the training image; optionally .sqsh, .sif and push."),
    "save": ("mtk.launcher.cli.triggers:save_command", "Ask a running job to checkpoint now and continue."),
    "stop": ("mtk.launcher.cli.triggers:stop_command", "Ask a running job to checkpoint and stop cleanly."),
    "convert": ("mtk.launcher.cli.convert", "Convert between a checkpoint and a Hugging Face model directory."),
    "import": ("mtk.launcher.cli.import_args", "Turn a Megatron-LM launch script or argument list into a job spec."),
    "presets": ("mtk.launcher.cli.presets", "List the model presets a spec can name, with their sizes."),
    "prune": ("mtk.launcher.cli.prune", "Remove previews and old ended runs, never a live run or a used checkpoint."),
    "schema": ("mtk.launcher.cli.schema", "Print the job spec's JSON schema (for editors)."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in VERBS:
            return None
        return cast(click.Command, load(VERBS[name][0], default="command"))

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """An unknown verb gets the closest one suggested ('lanch' → 'launch'), as an unknown option does."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            from mtk.suggest import did_you_mean

            hint = did_you_mean(args[0] if args else "", VERBS)
            if not hint or "No such command" not in exc.message:
                raise
            raise click.UsageError(f"{exc.message.rstrip('.')}{hint}", exc.ctx) from None

    def invoke(self, ctx: click.Context):
        """The error boundary: expected failures become one message (bad input exits 2, a failed run 1);
        a traceback only with --debug / MTK_DEBUG=1, or for a bug."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            if not reader_gone():
                raise  # a pipe of our own (a subprocess's) broke: a real failure
            sys.exit(0)
        except (Exception, KeyboardInterrupt) as exc:
            from mtk.failures import report

            sys.exit(report(exc, "mtk"))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, help_) in VERBS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mtk")
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True,
              callback=lambda _ctx, _param, on: os.environ.__setitem__("MTK_DEBUG", "1") if on else None,
              help="Show the full traceback of any error (also MTK_DEBUG=1).")
def cli() -> None:
    """mtk: build, launch and run Megatron-Core pretraining from one typed job spec.

    JOB.yaml defaults to ./mtk.yaml.
    """


def reader_gone() -> bool:
    """True when whoever reads our stdout or stderr has closed it (``mtk logs | head -1``): the output was wanted
    up to there, so the verb ends quietly with 0. Both are then pointed at /dev/null, so that the interpreter's
    flush at exit (and any message still to come) cannot raise a second time."""
    import select

    gone = False
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            closed = any(events & select.POLLERR for _, events in poller.poll(0))
        except (AttributeError, OSError, ValueError):  # not a real file (captured output): nothing to do
            continue
        if closed:
            gone = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
    return gone


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            code: int = cli.main(args=argv, prog_name="mtk", standalone_mode=True) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()  # here, not in the interpreter's exit, where a closed pipe would print a traceback
        return code
    except BrokenPipeError:  # outside a verb (click's own output, e.g. --help, or the last flush): a quiet end too
        if not reader_gone():
            raise
        return 0


if __name__ == "__main__":
    sys.exit(main())
