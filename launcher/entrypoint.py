"""``mtk-entrypoint STEP [ARGS...]``: the one command every node, pod and container runs.

The steps (fetch data, preprocess, the node's training step, one rank, the doctor, the preflight health gate),
their modules, help lines and which ones initialise CUDA are listed once, in :class:`mtk.steps.Step`
(``mtk-entrypoint --help`` prints them); a new step is one module plus one line there. Each step's module is
imported only when that step runs (torchrun starts a rank's module directly: ``-m mtk.training.worker``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import cast

from mtk.steps import Step


def usage() -> str:
    width = max(len(step) for step in Step)
    lines = ["usage: mtk-entrypoint STEP [ARGS...]", "", "steps:"]
    lines += [f"  {step:<{width}}  {step.summary}" for step in Step]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # a container started without a step: a usage error, never a silent success
        print(f"mtk-entrypoint: no step given; name one, e.g. `mtk-entrypoint train --job JOB.json`\n\n{usage()}",
              file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    step, rest = next((s for s in Step if s == argv[0]), None), argv[1:]
    if step is None:
        from mtk.suggest import did_you_mean

        print(f"mtk-entrypoint: unknown step '{argv[0]}'{did_you_mean(argv[0], Step)}\n\n{usage()}", file=sys.stderr)
        return 2
    if step.cuda:
        from .cuda_compat import reexec_if_needed

        reexec_if_needed(argv)
    try:
        from mtk.loading import load

        run = cast("Callable[[list[str]], int | None]", load(step.module, default="main"))
        return int(run(rest) or 0)
    except (Exception, KeyboardInterrupt) as exc:
        from mtk.failures import report

        return report(exc, f"mtk-entrypoint {step}")


if __name__ == "__main__":
    sys.exit(main())
