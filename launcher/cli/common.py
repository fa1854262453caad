"""Options and error handling shared by the CLI verbs."""

from __future__ import annotations

import click


class SuggestingChoice(click.Choice):
    """A choice whose refusal suggests the closest valid value, as the spec's unknown keys do ('slrum' → 'slurm')."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            from mtk.suggest import did_you_mean

            hint = did_you_mean(value, self.choices)
            if not hint:
                raise
            raise click.BadParameter(f"{exc.message.rstrip('.')}{hint}", ctx=exc.ctx, param=exc.param,
                                     param_hint=exc.param_hint) from None


class BackendChoice(SuggestingChoice):
    """``--backend``: the registered backends, read when the option is used (not at start-up, where scanning the
    installed distributions' entry points would slow every ``mtk`` command)."""

    def __init__(self) -> None:
        super().__init__([])

    @property
    def choices(self):
        from mtk.backend_registry import backend_names

        return tuple(backend_names())

    @choices.setter
    def choices(self, value) -> None:
        pass

    def convert(self, value, param, ctx):
        """A built-in name needs no scan of every installed distribution's entry points; any other name is
        checked against every registered backend."""
        from mtk.backends import REGISTRY

        if isinstance(value, str) and value in REGISTRY:
            return value
        return super().convert(value, param, ctx)


job_argument = click.argument("job_file", metavar="[JOB.yaml]", default="mtk.yaml", required=False)
set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                          help="Override a spec field, e.g. --set train.iterations=50 (repeatable).")
backend_option = click.option("--backend", "-b", type=BackendChoice(), default=None,
                              help="Where to run [default: from the spec's cluster block: slurm with cluster.slurm, "
                                   "eks with cluster.eks, else local].")
runs_dir_option = click.option("--runs-dir", default="runs", show_default=True,
                               help="Where run names are looked up when RUN is not a path.")


def pick_backend(job_file: str, overrides, backend: str | None) -> tuple[str, str]:
    """(--backend, "") or, without it, the backend the spec's cluster block names (``cluster.slurm`` → slurm) and a
    line saying so when it is not the default, for the verb to print once the spec is accepted."""
    if backend is not None:
        return backend, ""
    from mtk.backends import infer_backend
    from mtk.spec.loader import apply_overrides, read_yaml

    name, why = infer_backend(apply_overrides(read_yaml(job_file), list(overrides)).get("cluster"), job_file)
    return name, f"backend: {name} ({why}; --backend to choose another)" if why else ""


def load(job_file: str, overrides, backend: str | None, check_files: bool = False):
    from mtk.spec import load_job

    return load_job(job_file, list(overrides), backend=backend, check_files=check_files)


run_argument = click.argument("run_ref", metavar="[RUN]", required=False, default=None)


def pick_run(run_ref: str | None, runs_dir: str):
    """Resolve RUN through the one resolver (:func:`mtk.runs.resolve_run`); without one, the newest run under
    --runs-dir. Whenever RUN was not named exactly, stderr says which run it is (``--json`` output stays clean)."""
    from pathlib import Path

    from mtk.runs import failed_launches_since, newest_run, resolve_run

    if run_ref is not None:
        run, how = resolve_run(run_ref, runs_dir)
        if how:
            click.echo(f"run: {Path(run.record_dir or run.run_dir).name} ({run.record_dir or run.run_dir}){how}",
                       err=True)
        return run
    run = newest_run(runs_dir)
    passed = [Path(r.record_dir or r.run_dir).name for r in failed_launches_since(run, runs_dir)]
    over = f" (passing over {', '.join(passed)}: its launch failed)" if passed else ""
    click.echo(f"run: {run.name} ({run.record_dir or run.run_dir}), the newest under {runs_dir}/{over}", err=True)
    return run
