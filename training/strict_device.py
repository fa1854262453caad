"""Strict device checks for CPU runs: catch, on a laptop, the device bugs that would crash a GPU run.

The CPU compat layer maps ``cuda`` to ``cpu``, so on CPU a batch that was never moved to the GPU, a model
never ``.cuda()``'d, or a host tensor all-reduced on what would be an NCCL group all "work". This module
keeps the difference the mapping erases:

* a tensor is *on the device* when the code put it there: the result of ``.cuda()`` / ``.to('cuda')``
  (a new alias, as on a GPU, so the tensor it was called on keeps its own state),
  a factory call with ``device='cuda'`` / ``cuda:N`` / ``torch.cuda.current_device()``, or anything a
  torch function computes from such a tensor (tracked by the compat layer's function mode);
* a tensor is *on the host* when a factory (``torch.tensor``, ``zeros``, ``from_numpy``, ...) made it
  without a device or with ``device='cpu'``;
* a module is *on the device* after ``.cuda()`` / ``.to('cuda')`` on it or a parent.

Checked, with the caller's file and line in the error:

* a model forward (megatron's ``LanguageModule``, e.g. ``GPTModel``) whose module was not moved or whose
  tensor inputs are not on the device (would be "Expected all tensors to be on the same device");
* a ``torch.distributed`` collective or point-to-point call on a group that is NCCL on a GPU (every group
  not created with ``backend='gloo'``) that receives a host tensor (would be "No backend type associated
  with device type cpu").

Gradients made by autograd's C++ engine are neither host nor device here; collectives accept them (on a
GPU they live where their forward tensors did).
"""

from __future__ import annotations

import os
import sys
import traceback
import weakref
from typing import Any

# The CPU device object ``torch.cuda.current_device()`` returns once patched: passing *this* object as
# ``device=`` means "the accelerator", unlike ``torch.device('cpu')`` or ``tensor.device``.
CURRENT_DEVICE: list[Any] = [None]


def is_cuda_device(dev: Any) -> bool:
    """``dev`` names the accelerator (a CUDA device, an ordinal, or the patched current device)."""
    import torch

    if dev is CURRENT_DEVICE[0] and dev is not None:
        return True  # the object torch.cuda.current_device() returns here: "the current CUDA device"
    if isinstance(dev, str):
        return dev.startswith("cuda")
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    return isinstance(dev, int) and not isinstance(dev, bool)


class StrictDeviceError(RuntimeError):
    """Internal: code that runs on CPU would fail on a GPU (the CPU compat layer's strict mode); the message
    names the call site and the fix. A bug in mtk or megatron-core, shown with its traceback, never a user's input."""


_FACTORIES = ("tensor", "from_numpy", "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint")
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                "broadcast", "reduce", "all_to_all", "all_to_all_single", "send", "recv",
                "_all_gather_base", "_reduce_scatter_base")
# isend/irecv stay unwrapped: P2POp accepts only torch's own function objects; batch_isend_irecv is checked.
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_MARKERS = (f"{os.sep}torch{os.sep}", f"{os.sep}megatron{os.sep}")


class _Marks:
    """A set of live objects by identity (tensors' ``==`` is elementwise, so no WeakSet)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}

    def add(self, obj: Any) -> None:
        key = id(obj)
        ref = self._refs.get(key)
        if ref is not None and ref() is obj:
            return
        # mypy cannot infer a lambda whose defaults bind the key and dict (hence the ignore)
        self._refs[key] = weakref.ref(obj, lambda _r, k=key, d=self._refs: d.pop(k, None))  # type: ignore[misc]

    def discard(self, obj: Any) -> None:
        ref = self._refs.get(id(obj))
        if ref is not None and ref() is obj:
            del self._refs[id(obj)]

    def __contains__(self, obj: Any) -> bool:
        ref = self._refs.get(id(obj))
        return ref is not None and ref() is obj


class Tracker:
    """Device / host marks of tensors and modules; fed by the compat layer's function mode."""

    def __init__(self) -> None:
        self.device = _Marks()
        self.host = _Marks()
        self.modules = _Marks()
        self.host_groups: list[Any] = []  # process groups live as long as the process
        self.enabled = False
        self._factories: set[Any] = set()

    def bind_factories(self) -> None:
        import torch

        self._factories = {getattr(torch, name) for name in _FACTORIES}

    def to_device(self, tensor: Any) -> None:
        self.device.add(tensor)

    def moved(self, tensor: Any) -> Any:
        """What ``.cuda()`` returns here. On a GPU a host tensor's ``.cuda()`` is a new tensor and the
        original stays on the host, so a host tensor gets a fresh alias (same storage, autograd-connected)
        that is marked; the original keeps its marks. A tensor already on the device is returned as is."""
        if not self.enabled or tensor in self.device:
            return tensor
        alias = tensor.view_as(tensor)
        self.device.add(alias)
        return alias

    def record(self, func: Any, args: tuple, kwargs: dict, result: Any, to_device: bool) -> None:
        """Mark ``result`` of one torch function call (called for every call: keep it cheap)."""
        if not self.enabled:
            return
        import torch

        if not isinstance(result, torch.Tensor):
            if isinstance(result, (tuple, list)) and (to_device or self._any_device(args, kwargs)):
                for r in result:
                    if isinstance(r, torch.Tensor):
                        self.device.add(r)
            return
        if to_device:
            self.to_device(result)
        elif func in self._factories:
            dev = kwargs.get("device")
            host = dev is None or (isinstance(dev, str) and dev.startswith("cpu"))
            if host and not (args and isinstance(args[0], torch.Tensor) and args[0] in self.device):
                self.host.add(result)
        elif self._any_device(args, kwargs):
            self.device.add(result)

    def _any_device(self, args: tuple, kwargs: dict) -> bool:
        import torch

        for a in args:
            if isinstance(a, torch.Tensor):
                if a in self.device:
                    return True
            elif isinstance(a, (list, tuple)):
                for b in a:
                    if isinstance(b, torch.Tensor) and b in self.device:
                        return True
        return any(isinstance(a, torch.Tensor) and a in self.device for a in kwargs.values())

    # ------------------------------------------------------------------ checks
    def check_forward(self, module: Any, args: tuple, kwargs: dict) -> None:
        import torch

        if module not in self.modules:
            raise StrictDeviceError(
                f"{type(module).__name__} forward called at {call_site()} but the model was never moved to "
                f"the accelerator: on a GPU its host parameters crash the first micro-batch; call "
                f"module.cuda(torch.cuda.current_device()) on every model chunk before wrapping it")
        named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"{k}=", a) for k, a in kwargs.items()]
        for name, value in named:
            if isinstance(value, torch.Tensor) and value not in self.device:
                raise StrictDeviceError(
                    f"{type(module).__name__} forward called at {call_site()} with {name} "
                    f"(shape {tuple(value.shape)}, {value.dtype}) not on the accelerator: on a GPU this is "
                    f"'Expected all tensors to be on the same device'; move the batch with "
                    f".cuda(non_blocking=True) before the forward")

    def check_collective(self, name: str, tensors: list, group: Any) -> None:
        if group is not None and any(group is g for g in self.host_groups):
            return
        for t in tensors:
            if t in self.host:
                raise StrictDeviceError(
                    f"torch.distributed.{name} called at {call_site()} with a host tensor (shape "
                    f"{tuple(t.shape)}, {t.dtype}) on a process group that is NCCL on a GPU: there this is "
                    f"'No backend type associated with device type cpu'; create it with "
                    f"device=torch.cuda.current_device() (or .cuda() it)")


TRACKER = Tracker()


def call_site() -> str:
    """``file:line in function`` of the innermost caller outside torch, megatron and this package's
    device layer (the engine line, or a library line when that is all there is)."""
    frames = traceback.extract_stack()[:-1]
    own = (os.path.join(_PKG_DIR, "strict_device.py"), os.path.join(_PKG_DIR, "compat.py"))
    candidates = [f for f in frames if f.filename not in own]
    for f in reversed(candidates):
        if not any(m in f.filename for m in _LIBRARY_MARKERS):
            return f"{f.filename}:{f.lineno} in {f.name}"
    f = candidates[-1]
    return f"{f.filename}:{f.lineno} in {f.name}"


def _tensors_of(value: Any) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _wrap_collective(dist: Any, name: str) -> None:
    original = getattr(dist, name, None)
    if original is None:
        return

    def checked(*args, **kwargs):
        group = kwargs.get("group")
        tensors = [t for a in (*args, *kwargs.values()) for t in _tensors_of(a)]
        TRACKER.check_collective(name, tensors, group)
        return original(*args, **kwargs)

    checked.__wrapped__ = original  # type: ignore[attr-defined]
    checked.__name__ = name
    setattr(dist, name, checked)


def _wrap_batch_p2p(dist: Any) -> None:
    original = dist.batch_isend_irecv

    def batch_isend_irecv(p2p_op_list):
        for op in p2p_op_list:
            TRACKER.check_collective(f"batch_isend_irecv({op.op.__name__})", [op.tensor], op.group)
        return original(p2p_op_list)

    dist.batch_isend_irecv = batch_isend_irecv


def _wrap_new_group(dist: Any) -> None:
    original = dist.new_group

    def new_group(*args, **kwargs):
        group = original(*args, **kwargs)
        backend = kwargs.get("backend", args[2] if len(args) > 2 else None)
        if isinstance(group, dist.ProcessGroup) and backend is not None and "gloo" in str(backend).lower():
            TRACKER.host_groups.append(group)
        return group

    dist.new_group = new_group


def _wrap_module_moves(nn: Any) -> None:
    original_cuda, original_to = nn.Module.cuda, nn.Module.to

    def mark(module):
        for m in module.modules():
            TRACKER.modules.add(m)

    def cuda(self, device=None):
        result = original_cuda(self, device)
        mark(self)
        return result

    def to(self, *args, **kwargs):
        result = original_to(self, *args, **kwargs)
        if any(is_cuda_device(a) for a in (*args, kwargs.get("device"))):
            mark(self)
        return result

    nn.Module.cuda, nn.Module.to = cuda, to


def _language_module_class():
    mod = sys.modules.get("megatron.core.models.common.language_module.language_module")
    return getattr(mod, "LanguageModule", None)


def _guard_model(module, _name, _child):
    """Module-registration hook: the first time a megatron LanguageModule (GPTModel) gets a submodule, i.e.
    during its ``__init__``, give it a forward pre-hook that checks positional and keyword inputs."""
    cls = _language_module_class()
    if cls is None or not isinstance(module, cls) or getattr(module, "_mtk_strict_guard", False):
        return None
    module._mtk_strict_guard = True
    module.register_forward_pre_hook(lambda m, args, kwargs: TRACKER.check_forward(m, args, kwargs),
                                     with_kwargs=True, prepend=True)
    return None


def install() -> None:
    """Turn the checks on for this process (called by ``compat.install`` on CPU machines)."""
    if TRACKER.enabled:
        return
    import torch
    import torch.distributed as dist

    TRACKER.bind_factories()
    for name in _COLLECTIVES:
        _wrap_collective(dist, name)
    _wrap_batch_p2p(dist)
    _wrap_new_group(dist)
    _wrap_module_moves(torch.nn)
    torch.nn.modules.module.register_module_module_registration_hook(_guard_model)
    TRACKER.enabled = True


def enabled() -> bool:
    return TRACKER.enabled
