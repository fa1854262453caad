"""GPU detection and MFU: flag > env dump > instance type > unknown."""

from __future__ import annotations

import json
import statistics

import pytest
from mtk.launcher.report import build_report
from mtk.launcher.report.gpus import detect_gpu, peak_for


# Expected peaks from NVIDIA's documents (dense BF16 = the printed with-sparsity figure / 2), not from the code:
@pytest.mark.parametrize(("name", "canonical", "peak"), [
    ("NVIDIA A100-SXM4-80GB", "A100", 312.0),  # A100 datasheet: BF16 312 TFLOPS (624 with sparsity)
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4),  # H100 whitepaper, SXM5: BF16 989.4 / 1,978.9 sparse
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.0),  # H100 whitepaper, PCIe: BF16 756 / 1,513 sparse
    ("NVIDIA H100 NVL", "H100 NVL", 835.5),  # H100 datasheet, NVL: BF16 1,671 TFLOPS with sparsity
    ("NVIDIA H200", "H200", 989.4),  # H200 datasheet (SXM): BF16 1,979 TFLOPS with sparsity
    ("NVIDIA GH200 480GB", "GH200", 989.4),  # GH200 datasheet: BF16 1,979 TFLOPS with sparsity
    ("NVIDIA B200", "B200", 2250.0),  # HGX B200 datasheet: BF16 36 PFLOPS with sparsity / 8 GPUs / 2
    ("NVIDIA GB200", "GB200", 2500.0),  # GB200 NVL72 datasheet: BF16 360 PFLOPS with sparsity / 72 GPUs / 2
])
def test_peak_table(name, canonical, peak):
    assert peak_for(name) == (canonical, peak)


def test_unknown_gpu_has_no_peak():
    assert peak_for("NVIDIA A10G") is None


def _run(synth, tmp_path, job=None):
    recs = [synth.train_record(it) for it in range(1, 9)]
    run_dir = tmp_path / "r"
    synth.write_metrics(run_dir, recs)
    if job is not None:
        (run_dir / "job.json").write_text(json.dumps(job))
    return run_dir, recs


def test_mfu_from_env_dump(synth, tmp_path):
    run_dir, recs = _run(synth, tmp_path, {"cluster": {"device": "gpu", "instance_type": "p4d.24xlarge"}})
    (run_dir / "debug").mkdir()
    (run_dir / "debug" / "env-node0-rank0.json").write_text(
        json.dumps({"torch": {"devices": ["NVIDIA H100 80GB HBM3"] * 8}}))
    s = build_report(run_dir, plots=False, wandb=False)
    assert s.gpu == "NVIDIA H100 80GB HBM3" and s.peak_tflops == 989.4
    assert s.mfu == pytest.approx(statistics.median(r["tflops_per_gpu"] for r in recs) / 989.4)


def test_instance_type_when_no_dump(synth, tmp_path):
    run_dir, recs = _run(synth, tmp_path, {"cluster": {"device": "gpu", "instance_type": "p4d.24xlarge"}})
    s = build_report(run_dir, plots=False, wandb=False)
    assert (s.gpu, s.peak_tflops) == ("A100", 312.0)
    assert s.mfu == pytest.approx(statistics.median(r["tflops_per_gpu"] for r in recs) / 312.0)


def test_flags_override(synth, tmp_path):
    run_dir, _ = _run(synth, tmp_path, {"cluster": {"device": "gpu", "instance_type": "p4d.24xlarge"}})
    assert detect_gpu(run_dir, None, gpu="B200").peak_tflops == 2250.0
    custom = detect_gpu(run_dir, None, gpu="MI300X", peak_tflops=1307.0)
    assert (custom.name, custom.peak_tflops) == ("MI300X", 1307.0)
    assert detect_gpu(run_dir, None, gpu="L4").peak_tflops is None


def test_cpu_run_says_unknown(synth, tmp_path):
    run_dir, _ = _run(synth, tmp_path, {"cluster": {"device": "cpu"}})
    (run_dir / "debug").mkdir()
    (run_dir / "debug" / "env-host-rank0.json").write_text(json.dumps({"torch": {"devices": []}}))
    s = build_report(run_dir, plots=False, wandb=False)
    assert s.gpu == "unknown" and s.mfu is None and "cpu" in s.gpu_source.lower()
    assert any(n.startswith("MFU unknown") for n in s.notes)
