"""``mtk-entrypoint doctor``: a one-command pre-flight for a node or an image.

Reports Python, mtk, torch (CUDA build, visible GPUs), NCCL, megatron.core, the NCCL net plugin NCCL would
load, libfabric, EFA devices and GDRCopy. Each check says ok / FAIL / warn / skip, and a FAIL says what to do.
What is required depends on the device (``--device``, or the job's ``cluster.device``): on CPU, CUDA, NCCL and
EFA are skipped, so the same command is useful on a laptop, in CI and on a p5 node. Exit 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import platform
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

OK, FAIL, WARN, SKIP = "ok", "FAIL", "warn", "skip"
SYS_INFINIBAND = Path("/sys/class/infiniband")


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class Expect:
    device: str  # cpu | gpu
    gpus: int | None = None  # GPUs this node must show (None = at least one on gpu)
    efa: int = 0  # EFA devices this node must show


def _import(name: str):
    try:
        return importlib.import_module(name), ""
    except Exception as exc:  # ImportError, or a broken install raising anything on import
        return None, f"{type(exc).__name__}: {exc}"


def check_python() -> Check:
    return Check("python", OK, f"{platform.python_version()} ({sys.executable})")


def check_mtk() -> Check:
    import mtk

    return Check("mtk", OK, f"{mtk.__version__} ({Path(mtk.__file__).parent})")


def check_torch(expect: Expect) -> tuple[list[Check], object | None]:
    torch, err = _import("torch")
    if torch is None:
        cuda = Check("cuda", SKIP, "device is cpu") if expect.device == "cpu" else \
            Check("cuda", FAIL, "needs torch", "use the NGC PyTorch base image")
        return [Check("torch", FAIL, f"not importable ({err})",
                      "use the NGC PyTorch base image (or pip install torch on CPU)"), cuda], None
    checks = [Check("torch", OK, f"{torch.__version__}")]
    cuda_build = getattr(torch.version, "cuda", None)
    if expect.device == "cpu":
        checks.append(Check("cuda", SKIP, f"device is cpu (torch CUDA build: {cuda_build or 'none'})"))
        return checks, torch
    if not cuda_build:
        checks.append(Check("cuda", FAIL, "this torch is a CPU-only build",
                            "use the NGC PyTorch base image (its torch is built with CUDA)"))
        return checks, torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    want = expect.gpus
    if count == 0:
        checks.append(Check("cuda", FAIL, f"CUDA {cuda_build} build but no GPU is visible",
                            "run with GPUs (--gpus all, or Pyxis/EKS GPU resources) and check nvidia-smi"))
    elif want is not None and count < want:
        checks.append(Check("cuda", FAIL, f"CUDA {cuda_build}, {count} GPU(s) visible, the job needs {want}",
                            "match cluster.procs_per_node to the node's GPUs"))
    else:
        checks.append(Check("cuda", OK, f"CUDA {cuda_build}, {count} GPU(s): {torch.cuda.get_device_name(0)}"))
    return checks, torch


def check_nccl(torch, expect: Expect) -> Check:
    if expect.device == "cpu":
        return Check("nccl", SKIP, "device is cpu (training uses gloo)")
    if torch is None or not getattr(torch.version, "cuda", None):
        return Check("nccl", FAIL, "needs a CUDA build of torch", "use the NGC PyTorch base image")
    try:
        version = torch.cuda.nccl.version()
    except Exception as exc:
        return Check("nccl", FAIL, f"torch cannot report NCCL ({exc})", "reinstall the CUDA build of torch")
    text = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return Check("nccl", OK, text)


def _stub_gpu_only_imports() -> bool:
    """Import megatron.core on CPU as the engine does: its compat layer's import stubs first (True when active).
    A broken install that cannot even import the compat layer leaves megatron.core's own import to say why."""
    try:
        from mtk.training import compat
    except Exception:  # ImportError, or a broken install raising anything on import
        return False
    return compat.install_import_stubs()


def check_megatron(expect: Expect) -> Check:
    stubbed = False
    if expect.device == "cpu":  # the CPU compat layer stubs the one GPU-only module that needs triton
        stubbed = _stub_gpu_only_imports()
    with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed" is expected on CPU
        warnings.simplefilter("ignore")
        core, err = _import("megatron.core")
    if core is None:
        return Check("megatron.core", FAIL, f"not importable ({err})",
                     "pip install megatron-core (build-image pins image.megatron_core_version)")
    info, _ = _import("megatron.core.package_info")
    version = getattr(info, "__version__", None) or getattr(core, "__version__", "?")
    return Check("megatron.core", OK, f"{version}" + (" (triton stubbed: CPU)" if stubbed else ""))


def plugin_library() -> list[str] | None:
    """The libraries NCCL's net-plugin loader tries, in order, from NCCL_NET_PLUGIN (None = plugins disabled)."""
    name = os.environ.get("NCCL_NET_PLUGIN", "")
    if name.lower() == "none":
        return None
    if not name:
        return ["libnccl-net.so"]
    if "/" in name:
        return [name]
    return [f"libnccl-net-{name}.so", name]


def check_net_plugin(expect: Expect) -> Check:
    libs = plugin_library()
    need = expect.device == "gpu" and expect.efa > 0
    miss = FAIL if need else (WARN if expect.device == "gpu" else SKIP)
    if libs is None:
        return Check("nccl-net-plugin", miss, "NCCL_NET_PLUGIN=none: NCCL uses its built-in sockets/IB",
                     "unset NCCL_NET_PLUGIN or set it to ofi on EFA instances" if need else "")
    errors = []
    for lib in libs:
        try:
            handle = ctypes.CDLL(lib)
        except OSError as exc:
            errors.append(str(exc))
            continue
        versions = [v for v in range(12, 1, -1) if hasattr(handle, f"ncclNetPlugin_v{v}")]
        if not versions:
            return Check("nccl-net-plugin", miss, f"{lib} loads but exports no ncclNetPlugin_v* symbol",
                         "it is not an NCCL net plugin; check NCCL_NET_PLUGIN")
        return Check("nccl-net-plugin", OK, f"{lib} (net API v{versions[0]})")
    return Check("nccl-net-plugin", miss, f"{' / '.join(libs)} does not load ({'; '.join(errors)}); NCCL would "
                 "fall back to sockets", "install aws-ofi-nccl (build-image: image.ofi_nccl) and make it visible "
                 "to ldconfig" if expect.device == "gpu" else "")


def check_libfabric(expect: Expect) -> Check:
    for lib in ("libfabric.so.1", "/opt/amazon/efa/lib/libfabric.so.1"):
        try:
            handle = ctypes.CDLL(lib)
        except OSError:
            continue
        version = ""
        if hasattr(handle, "fi_version"):
            handle.fi_version.restype = ctypes.c_uint32
            raw = handle.fi_version()
            version = f" {raw >> 16}.{raw & 0xFFFF}"
        return Check("libfabric", OK, f"{lib}{version}")
    status = FAIL if expect.efa > 0 and expect.device == "gpu" else SKIP
    return Check("libfabric", status, "not found", "install the EFA software (build-image: image.efa)"
                 if status == FAIL else "")


def efa_devices(root: Path = SYS_INFINIBAND) -> list[str]:
    """RDMA devices driven by the efa kernel driver."""
    if not root.is_dir():
        return []
    found = []
    for dev in sorted(root.iterdir()):
        driver = dev / "device" / "driver"
        if driver.exists() and driver.resolve().name == "efa":
            found.append(dev.name)
    return found


def check_efa(expect: Expect, root: Path = SYS_INFINIBAND) -> Check:
    devices = efa_devices(root)
    uverbs = sorted(p.name for p in Path("/dev/infiniband").glob("uverbs*")) if Path("/dev/infiniband").is_dir() else []
    detail = f"{len(devices)} EFA device(s) {','.join(devices)}; /dev/infiniband: {len(uverbs)} uverbs".strip()
    if expect.efa == 0 or expect.device == "cpu":
        return Check("efa", OK if devices else SKIP, detail if devices else "none expected (instance has no EFA)")
    if len(devices) < expect.efa or len(uverbs) < expect.efa:
        return Check("efa", FAIL, f"{detail}; the job expects {expect.efa}",
                     "request vpc.amazonaws.com/efa (EKS) or pass /dev/infiniband into the container (Pyxis "
                     "does by default); check the instance type and efa_per_node")
    return Check("efa", OK, detail)


def check_gdrcopy(expect: Expect) -> Check:
    try:
        ctypes.CDLL("libgdrapi.so.2")
    except OSError:
        return Check("gdrcopy", WARN if expect.device == "gpu" else SKIP, "libgdrapi.so.2 not found",
                     "optional: build-image installs it unless image.gdrcopy is false")
    driver = Path("/dev/gdrdrv").exists()
    return Check("gdrcopy", OK, "libgdrapi.so.2" + (" + /dev/gdrdrv" if driver else " (no /dev/gdrdrv: host driver "
                                                                                  "absent, EFA works without it)"))


def run_checks(expect: Expect) -> list[Check]:
    checks = [check_python(), check_mtk()]
    torch_checks, torch = check_torch(expect)
    checks += torch_checks
    checks.append(check_nccl(torch, expect))
    checks.append(check_megatron(expect))
    checks.append(check_net_plugin(expect))
    checks.append(check_libfabric(expect))
    checks.append(check_efa(expect))
    checks.append(check_gdrcopy(expect))
    return checks


def auto_device() -> str:
    return "gpu" if Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists() else "cpu"


def expectations(args: argparse.Namespace) -> Expect:
    device, gpus, efa = args.device, None, 0
    if args.job:
        from mtk.netenv import efa_count
        from mtk.spec import load_job_json

        job = load_job_json(args.job)
        device = job.cluster.device if device == "auto" else device
        gpus = job.cluster.procs_per_node if device == "gpu" else None
        efa = efa_count(job)
    if args.expect_efa is not None:
        efa = args.expect_efa
    return Expect(device=auto_device() if device == "auto" else device, gpus=gpus, efa=efa)


def format_report(checks: list[Check], expect: Expect) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"mtk doctor: device={expect.device}, expected EFA devices={expect.efa}"]
    for c in checks:
        lines.append(f"  {c.status:<4}  {c.name:<{width}}  {c.detail}")
        if c.fix and c.status in (FAIL, WARN):
            lines.append(f"        {'':<{width}}  -> {c.fix}")
    failed = [c.name for c in checks if c.status == FAIL]
    lines.append(f"FAILED: {', '.join(failed)}" if failed else "all required checks passed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from mtk.suggest import ArgumentParser

    parser = ArgumentParser(prog="mtk-entrypoint doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", help="job.json of the run: sets the device, GPU and EFA expectations")
    parser.add_argument("--run-dir", help="accepted for symmetry with the other steps; unused")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                        help="what to require (default: the job's device, else gpu when /dev/nvidia* exists)")
    parser.add_argument("--expect-efa", type=int, default=None, metavar="N", help="EFA devices this node must show")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    expect = expectations(args)
    checks = run_checks(expect)
    if args.json:
        print(json.dumps({"expect": asdict(expect), "checks": [asdict(c) for c in checks],
                          "ok": not any(c.status == FAIL for c in checks)}, indent=2))
    else:
        print(format_report(checks, expect))
    return 1 if any(c.status == FAIL for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
