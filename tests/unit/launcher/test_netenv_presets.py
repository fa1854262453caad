"""Per-instance-type NCCL/EFA presets: what each instance type gets, that every value says why, that cluster.env
overrides any of it, that the preflight floor follows the instance type unless the spec sets one, that
`mtk validate` prints the preset and that docs/aws.md's table lists what the code sets."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mtk import netenv
from mtk.spec import load_job

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "gpt-7.5b-p5-slurm.yaml"
TUNING = {"NCCL_BUFFSIZE": "8388608", "NCCL_P2P_NET_CHUNKSIZE": "524288", "NCCL_TUNER_PLUGIN": netenv.TUNER_PLUGIN}


def job(instance: str | None, *sets: str):
    base = [f"cluster.instance_type={instance}" if instance else "cluster.instance_type=null",
            "cluster.efa_per_node=null", *sets]
    return load_job(EXAMPLE, base, backend="slurm")


@pytest.mark.parametrize("instance", sorted(netenv.INSTANCES))
def test_each_instance_type_gets_its_preset_each_value_with_a_reason(instance):
    j = job(instance)
    settings = netenv.preset(j)
    env = {s.name: s.value for s in settings}
    assert all(len(s.source) > 20 for s in settings)
    profile = netenv.INSTANCES[instance]
    assert (TUNING.items() <= env.items()) is profile.aws_nccl_tuning
    assert ("NCCL_NVLS_ENABLE" in env) is instance.startswith("p5")
    assert env["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "1" and env["FI_PROVIDER"] == "efa"
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) is profile.gpudirect_rdma
    assert netenv.efa_count(j) == profile.efa


def test_huge_pages_off_only_when_dataloader_workers_fork_over_efa():
    assert netenv.network_env(job("p5.48xlarge", "data.num_workers=2"))["FI_EFA_USE_HUGE_PAGE"] == "0"
    assert "FI_EFA_USE_HUGE_PAGE" not in netenv.network_env(job("p5.48xlarge", "data.num_workers=0"))
    assert "FI_EFA_USE_HUGE_PAGE" not in netenv.network_env(job(None, "data.num_workers=2"))  # no EFA


def test_cpu_jobs_and_unknown_instances():
    assert netenv.preset(job("p5.48xlarge", "cluster.device=cpu")) == []
    env = netenv.network_env(job("x9.huge"))
    assert "NCCL_BUFFSIZE" not in env and "FI_PROVIDER" not in env and env["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "1"


def test_cluster_env_overrides_any_preset_and_validate_says_so():
    j = job("p5.48xlarge", "cluster.env={NCCL_BUFFSIZE: '4194304', NCCL_NVLS_ENABLE: '1', MY_VAR: x}")
    env = netenv.network_env(j)
    assert env["NCCL_BUFFSIZE"] == "4194304" and env["NCCL_NVLS_ENABLE"] == "1" and env["MY_VAR"] == "x"
    text = "\n".join(netenv.describe(j))
    assert "NCCL_BUFFSIZE=4194304  (cluster.env overrides the preset's '8388608')" in text
    assert "MY_VAR=x  (cluster.env)" in text


def test_preflight_floor_from_the_instance_type_unless_the_spec_sets_one():
    assert netenv.min_busbw_gbps(job("p5.48xlarge"))[0] == 12.0
    assert netenv.min_busbw_gbps(job("p4d.24xlarge"))[0] == 3.0
    assert netenv.min_busbw_gbps(job("p5.48xlarge", "resilience.preflight.min_busbw_gbps=40")) == (
        40.0, "resilience.preflight.min_busbw_gbps")
    assert netenv.min_busbw_gbps(job("g5.48xlarge"))[0] is None
    assert netenv.min_busbw_gbps(job("p5.48xlarge", "cluster.device=cpu"))[0] is None


def test_mtk_validate_prints_the_preset_it_applied():
    out = subprocess.run([sys.executable, "-m", "mtk", "validate", str(EXAMPLE), "--backend", "slurm", "-q",
                          "--no-megatron"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "network preset: p5.48xlarge, 32 EFA per node" in out.stdout
    assert "  NCCL_NVLS_ENABLE=0  (NVLink SHARP off on H100/H200 nodes" in out.stdout
    assert "preflight all-reduce floor: 12.0 GB/s (p5.48xlarge preset" in out.stdout


def test_aws_guide_table_lists_every_variable_the_presets_set():
    readme = (REPO / "docs" / "aws.md").read_text()
    table = readme.split("| variable / setting |", 1)[1].split("\n\n", 1)[0]
    names = set(re.findall(r"^\| `([A-Z0-9_]+)[=`]", table, re.M))
    code = {s.name for i in netenv.INSTANCES for s in netenv.preset(job(i, "data.num_workers=2",
                                                                        "parallel.sequence_parallel=true"))}
    assert code == names, f"docs/aws.md's table and mtk/netenv.py differ: {sorted(code ^ names)}"
