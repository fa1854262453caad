"""The CPU compat layer: version pin, triton stub, and the CUDA→CPU mapping (in a fresh interpreter,
because install() patches torch process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from mtk.training import compat


def test_version_pin_accepts_the_pinned_version():
    assert compat.check_version(compat.MEGATRON_CORE_VERSION) == "0.19.2"


@pytest.mark.parametrize("other", ["0.19.1", "0.20.0", "0.19.2rc1"])
def test_version_pin_rejects_other_versions_with_the_fix(other):
    with pytest.raises(compat.MegatronVersionError) as exc:
        compat.check_version(other)
    msg = str(exc.value)
    assert other in msg and "megatron-core==0.19.2" in msg


def test_installed_megatron_is_the_pinned_one():
    assert compat.check_version() == compat.MEGATRON_CORE_VERSION


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=240)


@pytest.mark.integration  # imports megatron.core in a fresh interpreter (~10-20 s)
def test_cpu_mapping_and_megatron_import_in_a_fresh_process():
    proc = _run("""
        import importlib.util, json, torch
        from mtk.training import compat
        assert not compat.active()
        assert compat.install() is True and compat.active()
        out = {}
        out["zeros"] = str(torch.zeros(3, device="cuda").device)
        out["zeros_n"] = str(torch.empty(2, device="cuda:1").device)
        out["int_dev"] = str(torch.ones(2, device=0).device)
        t = torch.ones(2)
        moved = t.cuda()
        from mtk.training.strict_device import TRACKER
        out["cuda_alias"] = [moved is not t, moved.data_ptr() == t.data_ptr(), str(moved.device),
                             moved in TRACKER.device, t in TRACKER.host, t not in TRACKER.device]
        out["to_cuda"] = str(t.to("cuda").device)
        out["to_int"] = str(t.to(torch.cuda.current_device()).device)
        out["to_dtype"] = str(t.to(torch.float64).dtype)
        out["type"] = t.type()
        out["type_bf16"] = t.bfloat16().type()
        out["type_convert"] = t.type(torch.float64).dtype == torch.float64
        out["current_device"] = str(torch.cuda.current_device())
        torch.cuda.synchronize()
        s = torch.cuda.current_stream(); s.wait_stream(s)
        triton = importlib.util.find_spec("triton") is not None
        import sys
        import megatron.core
        from megatron.core.models.gpt import GPTModel
        from megatron.core.transformer.moe import router
        # megatron decorates its fusions and the inference router with torch.compile at import: deferred
        out["inductor_imported"] = sorted(m for m in ("torch._inductor", "torch._dynamo") if m in sys.modules)
        twice = torch.compile(lambda x: x * 2, backend="eager")
        out["deferred_call"] = twice(torch.ones(2)).tolist()
        out["module_compiled"] = type(torch.compile(torch.nn.Linear(2, 2), backend="eager")).__name__
        from megatron.core.transformer.moe.ops import paged_stash
        out["stub"] = isinstance(paged_stash.__loader__, compat._PagedStashStub)
        out["triton"] = triton
        out["block"] = paged_stash.GLOBAL_BLOCK_SIZE
        print(json.dumps(out))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["zeros"] == out["zeros_n"] == out["int_dev"] == "cpu"
    # .cuda() is a new CPU alias (as on a GPU, a new tensor), tracked as on the device; the original stays host
    assert out["cuda_alias"] == [True, True, "cpu", True, True, True]
    assert out["to_cuda"] == out["to_int"] == "cpu"
    assert out["to_dtype"] == "torch.float64"
    assert out["type"] == "torch.cuda.FloatTensor"
    assert out["type_bf16"] == "torch.cuda.BFloat16Tensor"
    assert out["type_convert"] is True
    assert out["current_device"] == "cpu"
    assert out["stub"] is (not out["triton"])
    assert out["block"] == 1024
    assert out["inductor_imported"] == []
    assert out["deferred_call"] == [2.0, 2.0]  # a deferred function still compiles and runs when called
    assert out["module_compiled"] == "OptimizedModule"  # modules are compiled as before


def test_stub_kernels_refuse_to_run():
    """Without triton (hidden here, so the test runs the stub whether or not this machine has it)."""
    proc = _run("""
        import sys
        sys.modules["triton"] = None  # importlib.util.find_spec("triton") is None: as if not installed
        from mtk.training import compat
        assert compat.install_import_stubs() is True
        from megatron.core.transformer.moe.ops.paged_stash import paged_stash_copy_kernel
        try:
            paged_stash_copy_kernel()
        except RuntimeError as e:
            print("refused:", e)
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused: paged stash kernels need triton" in proc.stdout, proc.stdout


def test_no_stub_when_triton_is_importable(tmp_path):
    """With a triton on the path (an empty stand-in package here), megatron's own module is left alone."""
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("")
    proc = _run(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from mtk.training import compat
        assert compat.install_import_stubs() is False
        assert not any(isinstance(f, compat._PagedStashStub) for f in sys.meta_path)
        print("no stub")
    """)
    assert proc.returncode == 0 and "no stub" in proc.stdout, proc.stderr[-2000:]


def test_install_is_a_noop_when_cuda_is_available():
    """With CUDA present nothing is patched (simulated: is_available forced True before install)."""
    proc = _run("""
        import torch
        torch.cuda.is_available = lambda: True
        original = torch.cuda.current_device
        original_compile = torch.compile
        from mtk.training import compat
        assert compat.install() is False
        assert not compat.active()
        assert torch.cuda.current_device is original
        assert torch.compile is original_compile
        assert torch.ones(1).type() == "torch.FloatTensor"
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"
