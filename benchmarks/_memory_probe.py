"""Run mtk's training worker in this process and keep the CUDA allocator's peaks in a JSON file.

    python _memory_probe.py PEAKS.json --job JOB --run-dir DIR      (under torchrun, one GPU)

A thread samples ``torch.cuda.max_memory_allocated/reserved`` (both monotonic peaks) every half second and at
exit, so the file holds the steady-state peak however the worker ends; the engine itself is untouched.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading


def main() -> None:
    peaks_path = sys.argv[1]
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    import torch

    def write() -> None:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        data = {"allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved()}
        tmp = f"{peaks_path}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, peaks_path)

    def sample(stop: threading.Event) -> None:
        while not stop.wait(0.5):
            write()

    stop = threading.Event()
    threading.Thread(target=sample, args=(stop,), daemon=True).start()
    atexit.register(write)
    runpy.run_module("mtk.training.worker", run_name="__main__")


if __name__ == "__main__":
    main()
