"""Which GPU a run used and its dense bf16 peak, for MFU = achieved TFLOP/s per GPU ÷ peak.

Peaks are the vendors' dense (no sparsity) bf16 tensor-core figures in TFLOP/s. A GPU not in the table gives
no MFU rather than a wrong one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mtk import run_layout

# more specific names come first. Each figure is NVIDIA's published BF16 tensor-core peak WITHOUT sparsity (the
# datasheets print the 2:4-sparsity figure, twice the dense one, with a footnote):
PEAKS: tuple[tuple[str, str, float], ...] = (
    # GB200 NVL72 datasheet: FP16/BF16 360 PFLOPS with sparsity for 72 GPUs -> 5 PF sparse, 2.5 PF dense per GPU
    ("GB200", "GB200", 2500.0),
    # HGX B200 datasheet: FP16/BF16 36 PFLOPS with sparsity for 8 GPUs -> 4.5 PF sparse, 2.25 PF dense per GPU
    ("B200", "B200", 2250.0),
    # GH200 Grace Hopper datasheet: the H100 SXM tensor cores and clocks (BF16 1,979 TFLOPS with sparsity)
    ("GH200", "GH200", 989.4),
    # H200 datasheet (SXM): BF16 1,979 TFLOPS with sparsity, the GH100 tensor cores of the H100 SXM -> 989.4
    ("H200", "H200", 989.4),
    # NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 PCIe: peak BF16 756 / 1,513 (sparse) TFLOPS
    ("H100 PCIE", "H100 PCIe", 756.0),
    # H100 datasheet, H100 NVL column: BF16 1,671 TFLOPS with sparsity -> 835.5 dense
    ("H100 NVL", "H100 NVL", 835.5),
    # H100 whitepaper, H100 SXM5: peak BF16 989.4 / 1,978.9 (sparse) TFLOPS (datasheet: 1,979 with sparsity)
    ("H100", "H100 SXM", 989.4),
    # A100 datasheet: BFLOAT16 Tensor Core 312 TFLOPS (624 with sparsity)
    ("A100", "A100", 312.0),
)

# AWS instance types -> GPU, used when no environment dump names the device.
INSTANCE_GPUS: dict[str, str] = {
    "p4d.24xlarge": "A100",
    "p4de.24xlarge": "A100",
    "p5.48xlarge": "H100 SXM",
    "p5e.48xlarge": "H200",
    "p5en.48xlarge": "H200",
    "p6-b200.48xlarge": "B200",
}


@dataclass(frozen=True)
class Gpu:
    """The GPU a report uses: ``name`` as found, ``peak_tflops`` None when unknown, ``source`` says where from."""

    name: str
    peak_tflops: float | None
    source: str


def peak_for(name: str) -> tuple[str, float] | None:
    """(canonical name, dense bf16 TFLOP/s) for a device name like 'NVIDIA H100 80GB HBM3', else None."""
    upper = name.upper().replace("-", " ")
    for needle, canonical, peak in PEAKS:
        if needle in upper:
            return canonical, peak
    return None


def devices_from_env_dumps(run_dir: Path) -> list[str]:
    """Device names recorded by the engine's environment dump (``debug/env-*.json``), first dump that has any."""
    for path in sorted((run_dir / run_layout.DEBUG_DIR).glob("env-*.json")):
        try:
            devices = json.loads(path.read_text()).get("torch", {}).get("devices") or []
        except (OSError, ValueError, AttributeError):
            continue
        if devices:
            return [str(d) for d in devices]
    return []


def detect_gpu(run_dir: Path, job: dict | None, gpu: str | None = None,
               peak_tflops: float | None = None) -> Gpu:
    """Pick the GPU: ``--gpu``/``--peak-tflops`` flags, else the env dump, else the instance type, else unknown."""
    if gpu or peak_tflops:
        name = gpu or "custom"
        found = peak_for(name)
        peak = peak_tflops if peak_tflops else (found[1] if found else None)
        return Gpu(found[0] if found and not peak_tflops else name, peak, "command line")
    devices = devices_from_env_dumps(run_dir)
    if devices:
        found = peak_for(devices[0])
        return Gpu(devices[0], found[1] if found else None, f"{run_layout.DEBUG_DIR}/env-*.json")
    instance = ((job or {}).get("cluster") or {}).get("instance_type")
    if instance in INSTANCE_GPUS:
        found = peak_for(INSTANCE_GPUS[instance])
        return Gpu(INSTANCE_GPUS[instance], found[1] if found else None, f"cluster.instance_type {instance}")
    device = ((job or {}).get("cluster") or {}).get("device")
    if device == "cpu":
        return Gpu("unknown", None, "CPU run: cluster.device is cpu")
    return Gpu("unknown", None, "no env dump with devices, no known instance type; pass --gpu")
