"""Make megatron-core 0.19.2 run on a CPU-only machine (gloo), and do nothing when CUDA is present.

megatron.core hard-codes CUDA in hot paths even with ``use_cpu_initialization=True``
(``torch.zeros(..., device="cuda")`` in the schedules, ``torch.cuda.current_device()`` in the grad
buffers, ``torch.cuda.current_stream()`` in DDP, ``param.grad.type() == 'torch.cuda.FloatTensor'`` in
grad clipping). On a machine without CUDA :func:`install` patches exactly those spots:

* a ``TorchFunctionMode`` that rewrites ``device='cuda' | 'cuda:N' | N`` to ``'cpu'`` in every torch
  call and turns ``Tensor.cuda()`` / ``.to('cuda')`` into CPU no-ops;
* ``torch.cuda.current_device`` → the CPU device; ``synchronize``/``set_device`` → no-ops; ``Stream``/``Event``/
  ``current_stream``/``stream()`` → one do-nothing stream (MoE's token dispatcher creates side streams);
* ``Tensor.type()`` (no argument) reports ``torch.cuda.*Tensor`` so the clip-grad assertion holds;
* ``torch.distributed.all_to_all_single`` accepts tensor split sizes (MoE dispatcher on gloo);
* if ``triton`` is not installed, a stub for ``megatron.core.transformer.moe.ops.paged_stash`` (the one
  module that imports triton at ``import megatron.core`` time; its kernels are GPU-only anyway);
* ``torch.compile`` builds its wrapper at a function's first call instead of at decoration: megatron-core
  decorates its fusions (``jit_fuser``) and the inference router with it at import, and building those wrappers
  imports dynamo and inductor — 2.9 of the 4.7 CPU seconds ``import megatron.core`` costs every rank here,
  for functions a CPU run never calls (a call still compiles, as before).

Rewriting ``cuda`` to ``cpu`` would also hide the engine's own device bugs (a batch never moved to the GPU,
a host tensor all-reduced on NCCL). So the layer is *strict* (:mod:`.strict_device`): it tracks every
tensor the code means to put on the accelerator (``.cuda()``, ``.to('cuda')``, ``device='cuda'`` or
``device=torch.cuda.current_device()``, and what is computed from those) and every module moved there;
a model forward that receives an untracked tensor or an unmoved module, and a collective on a would-be
NCCL group that receives a tensor created on the host, fail naming the call site.

The patches reach into megatron-core internals, so :func:`check_version` refuses any other version.
Import this module before ``megatron.core`` (``install()`` must run first: ``import megatron.core``
already needs the triton stub).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
from typing import Any

from mtk.exitcodes import BadInput

from . import checkpoint_guard
from .strict_device import CURRENT_DEVICE, is_cuda_device

MEGATRON_CORE_VERSION = "0.19.2"
PAGED_STASH_MODULE = "megatron.core.transformer.moe.ops.paged_stash"

_state: dict[str, Any] = {"installed": False, "mode": None}


class MegatronVersionError(BadInput, RuntimeError):
    """The installed megatron-core is not the version the compat layer was written for: set-up, exit 2."""


def check_version(installed: str | None = None) -> str:
    """Return the megatron-core version, or raise if it is not the pinned one.

    Reads package metadata only, so it works before ``megatron.core`` can be imported.
    """
    if installed is None:
        try:
            installed = importlib.metadata.version("megatron-core")
        except importlib.metadata.PackageNotFoundError as exc:
            raise MegatronVersionError(
                f"megatron-core is not installed; mtk's engine needs megatron-core=={MEGATRON_CORE_VERSION} "
                f"(pip install --ignore-requires-python megatron-core=={MEGATRON_CORE_VERSION})") from exc
    if installed != MEGATRON_CORE_VERSION:
        raise MegatronVersionError(
            f"megatron-core {installed} is installed but mtk.training is pinned to {MEGATRON_CORE_VERSION} "
            f"(its CPU compat layer and checkpoint handling touch internals); install "
            f"megatron-core=={MEGATRON_CORE_VERSION}")
    return installed


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


# --------------------------------------------------------------------------- triton stub


def _gpu_only(*_args: Any, **_kwargs: Any) -> None:
    raise RuntimeError("paged stash kernels need triton and a GPU; they are stubbed on this machine")


class _PagedStashStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serve a triton-free ``ops.paged_stash`` (same public names, kernels that raise if called)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == PAGED_STASH_MODULE:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module: Any) -> None:  # a fresh, empty module: the names set here are its API
        module.GLOBAL_BLOCK_SIZE = 1024
        module.paged_stash_copy_kernel = _gpu_only
        module.paged_stash_pop_kernel = _gpu_only
        module.__all__ = ["GLOBAL_BLOCK_SIZE", "paged_stash_copy_kernel", "paged_stash_pop_kernel"]


def install_import_stubs() -> bool:
    """Register the paged-stash stub when triton is missing. Returns True if the stub is active."""
    if any(isinstance(f, _PagedStashStub) for f in sys.meta_path):
        return True
    if importlib.util.find_spec("triton") is not None:
        return False
    sys.meta_path.insert(0, _PagedStashStub())
    return True


# --------------------------------------------------------------------------- device mapping


def _device_mode_class():
    import torch
    from torch.overrides import TorchFunctionMode

    cpu = torch.device("cpu")
    tensor_cuda = torch.Tensor.cuda
    tensor_to = torch.Tensor.to

    from . import strict_device

    track = strict_device.TRACKER

    class CudaToCpu(TorchFunctionMode):
        """Rewrites CUDA device arguments to CPU for every torch function call, and tells the strict-device
        tracker which results were meant for the accelerator."""

        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            to_device = False
            if "device" in kwargs and is_cuda_device(kwargs["device"]):
                kwargs = {**kwargs, "device": cpu}
                to_device = True
            if func is tensor_cuda:
                return track.moved(args[0])
            if func is tensor_to:
                moved = tuple(cpu if is_cuda_device(a) else a for a in args[1:])
                to_device = to_device or any(a is cpu for a in moved)
                args = args[:1] + moved
            result = func(*args, **kwargs)
            if to_device and func is tensor_to and result is args[0]:
                return track.moved(result)
            track.record(func, args, kwargs, result, to_device)
            return result

    return CudaToCpu


_CUDA_TYPE_NAMES = {
    "torch.FloatTensor": "torch.cuda.FloatTensor",
    "torch.HalfTensor": "torch.cuda.HalfTensor",
    "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor",
    "torch.DoubleTensor": "torch.cuda.DoubleTensor",
    "torch.LongTensor": "torch.cuda.LongTensor",
    "torch.IntTensor": "torch.cuda.IntTensor",
}


class _NullEvent:
    """Stands in for a CUDA event: CPU work is already complete when it is recorded."""

    def __init__(self, *_a: Any, **_k: Any) -> None: ...

    def record(self, *_a: Any) -> None: ...

    def wait(self, *_a: Any) -> None: ...

    def synchronize(self) -> None: ...

    def query(self) -> bool:
        return True


class _NullStream:
    """Stands in for a CUDA stream. There is one: every "new" stream is the current one, so code that
    compares streams (``current_stream() != side_stream``) sees no side stream and skips record_stream."""

    _instance: _NullStream | None = None

    def __new__(cls, *_a: Any, **_k: Any):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def wait_stream(self, *_a: Any) -> None: ...

    def wait_event(self, *_a: Any) -> None: ...

    def record_event(self, *_a: Any) -> _NullEvent:
        return _NullEvent()

    def synchronize(self) -> None: ...

    def query(self) -> bool:
        return True

    def __enter__(self):
        return self

    def __exit__(self, *_a: Any) -> None: ...


def _patch_cuda_module() -> None:
    import torch

    original_type = torch.Tensor.type

    def type_(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None and not kwargs:
            name = original_type(self)
            return _CUDA_TYPE_NAMES.get(name, name)
        return original_type(self, dtype, non_blocking, **kwargs)

    # Every assignment below swaps a CUDA API for a CPU stand-in on purpose; torch's declared types describe the
    # real API, hence the targeted type: ignore on each.
    torch.Tensor.type = type_  # type: ignore[method-assign]
    # A device object rather than 0: megatron passes it as ``device=`` in code the function mode cannot
    # see (e.g. autograd backward of recomputed blocks runs inside the mode's own handler, mode disabled).
    cpu = torch.device("cpu")
    CURRENT_DEVICE[0] = cpu
    torch.cuda.current_device = lambda: cpu  # type: ignore[assignment,return-value]
    torch.cuda.set_device = lambda *_a, **_k: None
    torch.cuda.synchronize = lambda *_a, **_k: None
    torch.cuda.current_stream = lambda *_a, **_k: _NullStream()  # type: ignore[assignment]
    torch.cuda.default_stream = lambda *_a, **_k: _NullStream()  # type: ignore[assignment]
    # Recompute (tensor_parallel.checkpoint) saves and restores the "CUDA" RNG around the recomputed
    # region; on CPU the generator that matters is the CPU one (megatron's setter is lazily queued, a no-op).
    torch.cuda.random.get_rng_state = torch.cuda.get_rng_state = lambda *_a, **_k: torch.get_rng_state()
    torch.cuda.Stream = _NullStream  # type: ignore[misc,assignment]
    torch.cuda.Event = _NullEvent  # type: ignore[misc,assignment]
    torch.cuda.stream = lambda *_a, **_k: contextlib.nullcontext()  # type: ignore[assignment]


def _patch_all_to_all() -> None:
    """MoE's token dispatcher passes split sizes as tensors it expects to have moved to host memory as
    numpy arrays; on CPU they were never "on the GPU", stay tensors, and gloo's binding rejects them."""
    import torch.distributed as dist

    original = dist.all_to_all_single

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, *args, **kwargs):
        def as_list(v):
            return v.tolist() if hasattr(v, "tolist") else v

        return original(output, input, as_list(output_split_sizes), as_list(input_split_sizes), *args, **kwargs)

    dist.all_to_all_single = all_to_all_single


def _defer_torch_compile() -> None:
    """Make ``torch.compile(fn)`` cost nothing until ``fn`` is called (modules are compiled as before)."""
    import functools

    import torch

    build = torch.compile
    if getattr(build, "_mtk_deferred", False):
        return

    def compile_on_first_call(model: Any = None, **options: Any) -> Any:
        if model is None:  # used as ``@torch.compile(...)``
            return lambda fn: compile_on_first_call(fn, **options)
        if isinstance(model, torch.nn.Module) or not callable(model):
            return build(model, **options)
        compiled: list[Any] = []

        @functools.wraps(model)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not compiled:
                compiled.append(build(model, **options))
            return compiled[0](*args, **kwargs)

        return call

    compile_on_first_call._mtk_deferred = True  # type: ignore[attr-defined]
    torch.compile = compile_on_first_call


def install() -> bool:
    """Apply the CPU compat layer once per process. Returns True if it is active (no CUDA).

    With CUDA present this only checks the version and restricts the checkpoint unpicklers
    (:mod:`.checkpoint_guard`): megatron-core runs unmodified otherwise.
    """
    check_version()
    if _state["installed"]:
        return _state["mode"] is not None
    _state["installed"] = True
    install_import_stubs()
    checkpoint_guard.install()  # on GPUs too: megatron-core's checkpoint reads unpickle without restriction
    if cuda_available():
        return False
    _defer_torch_compile()  # before megatron.core is imported, or its import pays for wrappers it never calls
    _patch_cuda_module()
    _patch_all_to_all()
    from . import strict_device

    strict_device.install()
    mode = _device_mode_class()()
    mode.__enter__()  # stays active for the whole process (the worker's lifetime)
    _state["mode"] = mode
    return True


def active() -> bool:
    """True when the CPU device mapping is in effect in this process."""
    return _state["mode"] is not None
