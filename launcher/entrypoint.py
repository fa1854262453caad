"""``mtk-entrypoint``: the one command every node, pod and container runs.

    mtk-entrypoint getdata    --job JOB.json   fetch corpus + tokenizer files
    mtk-entrypoint preprocess --job JOB.json   JSONL -> Megatron .bin/.idx (also takes Megatron's own flags)
    mtk-entrypoint train      --job JOB.json   derive rendezvous from the environment, run torchrun
    mtk-entrypoint worker     --job JOB.json   one training rank (torchrun starts the same module directly:
                                               ``-m mtk.training.worker``)
    mtk-entrypoint doctor                      pre-flight: torch/CUDA/NCCL/EFA/megatron.core
    mtk-entrypoint preflight  --job JOB.json   health gate on every node: doctor, storage, all-reduce check

Each step lives in its own module and is imported only when called; the steps, their modules and which ones
initialise CUDA are listed once, in :class:`mtk.steps.Step` (a new step is one module plus one line there).
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
