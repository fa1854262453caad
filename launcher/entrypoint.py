"""``mtk-entrypoint``: the one command every node, pod and container runs.

    mtk-entrypoint getdata    --job JOB.json   fetch corpus + tokenizer files
    mtk-entrypoint preprocess --job JOB.json   JSONL -> Megatron .bin/.idx (also takes Megatron's own flags)
    mtk-entrypoint train      --job JOB.json   derive rendezvous from the environment, run torchrun
    mtk-entrypoint worker     --job JOB.json   one training rank (torchrun starts the same module directly:
                                               ``-m mtk.training.worker``)
    mtk-entrypoint doctor                      pre-flight: torch/CUDA/NCCL/EFA/megatron.core
    mtk-entrypoint preflight  --job JOB.json   health gate on every node: doctor, storage, all-reduce check

Each step lives in its own module and is imported only when called.
"""

from __future__ import annotations

import importlib
import sys

STEPS: dict[str, tuple[str, str]] = {
    "getdata": ("mtk.data_jobs.getdata", "fetch corpus and tokenizer files into the shared data dir"),
    "preprocess": ("mtk.data_jobs.preprocess_cli", "tokenize JSONL into Megatron .bin/.idx"),
    "train": ("mtk.launcher.train_step", "start torchrun for this node with rendezvous from the environment"),
    "worker": ("mtk.training.worker", "one training rank (started by torchrun)"),
    "doctor": ("mtk.containers.doctor", "check torch, CUDA, NCCL, EFA and megatron.core on this node"),
    "preflight": ("mtk.launcher.preflight", "health gate: doctor, storage, GPU/EFA counts, all-reduce across nodes"),
}


# Steps that initialise CUDA (or start what does): checked for CUDA forward compatibility first.
CUDA_STEPS = ("train", "worker", "doctor", "preflight")


def usage() -> str:
    width = max(map(len, STEPS))
    lines = ["usage: mtk-entrypoint STEP [ARGS...]", "", "steps:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in STEPS.items()]
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
    step, rest = argv[0], argv[1:]
    if step not in STEPS:
        from mtk.suggest import did_you_mean

        print(f"mtk-entrypoint: unknown step '{step}'{did_you_mean(step, STEPS)}\n\n{usage()}", file=sys.stderr)
        return 2
    if step in CUDA_STEPS:
        from .cuda_compat import reexec_if_needed

        reexec_if_needed(argv)
    try:
        module = importlib.import_module(STEPS[step][0])
        return int(module.main(rest) or 0)
    except (Exception, KeyboardInterrupt) as exc:
        from mtk.failures import report

        return report(exc, f"mtk-entrypoint {step}")


if __name__ == "__main__":
    sys.exit(main())
