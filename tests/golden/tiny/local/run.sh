#!/usr/bin/env bash
# mtk local run of tiny: generated, do not edit.
set -euo pipefail
cd /shared/runs/tiny-local
# train runs: torchrun --standalone --nnodes 1 --nproc-per-node 2 -m mtk.training.worker --job /shared/runs/tiny-local/job.json --run-dir /shared/runs/tiny-local
mtk-entrypoint train --job /shared/runs/tiny-local/job.json --run-dir /shared/runs/tiny-local
