"""The doctor's probes: NCCL plugin resolution and loading, EFA devices by driver (on real files)."""

from __future__ import annotations

import ctypes.util

from mtk.containers.doctor import Expect, check_efa, check_net_plugin, efa_devices, plugin_library


def test_plugin_name_follows_nccl_rules(monkeypatch):
    monkeypatch.delenv("NCCL_NET_PLUGIN", raising=False)
    assert plugin_library() == ["libnccl-net.so"]
    cases = (("ofi", ["libnccl-net-ofi.so", "ofi"]), ("none", None), ("/opt/x/net.so", ["/opt/x/net.so"]))
    for value, libs in cases:
        monkeypatch.setenv("NCCL_NET_PLUGIN", value)
        assert plugin_library() == libs


def test_a_library_that_is_not_a_plugin_is_caught(monkeypatch):
    libc = ctypes.util.find_library("c")
    monkeypatch.setenv("NCCL_NET_PLUGIN", libc)
    check = check_net_plugin(Expect(device="gpu", efa=4))
    assert check.status == "FAIL" and "exports no ncclNetPlugin_v*" in check.detail


def test_efa_devices_are_found_by_driver(tmp_path):
    drivers = tmp_path / "drivers"
    (drivers / "efa").mkdir(parents=True)
    (drivers / "mlx5_core").mkdir()
    root = tmp_path / "infiniband"
    for dev, driver in (("rdmap16s27", "efa"), ("rdmap32s27", "efa"), ("mlx5_0", "mlx5_core")):
        (root / dev / "device").mkdir(parents=True)
        (root / dev / "device" / "driver").symlink_to(drivers / driver)
    assert efa_devices(root) == ["rdmap16s27", "rdmap32s27"]
    assert efa_devices(tmp_path / "absent") == []
    missing = check_efa(Expect(device="gpu", efa=4), root)
    assert missing.status == "FAIL" and "expects 4" in missing.detail and "vpc.amazonaws.com/efa" in missing.fix
    assert check_efa(Expect(device="cpu", efa=0), root).status == "ok"
