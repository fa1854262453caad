"""The torch values a checkpoint's pickles name by their globals: dtypes, storage types, and the storages the loader
reads for them. Values, never called; no rule here runs anything of the file."""

from __future__ import annotations

import functools
import warnings
from typing import Any

from .base import Token


class StorageKind(Token):
    """``torch.FloatStorage`` & co. in a persistent id: names the storage's dtype; never called."""

    def __init__(self, name: str, dtype: Any) -> None:
        super().__init__(name)
        self.dtype = dtype


class Storage:
    """A storage a persistent id named, as the torch-file reader loaded it (``typed`` None in a scan)."""

    def __init__(self, dtype: Any, numel: int, typed: Any) -> None:
        self.dtype, self.numel, self.typed = dtype, numel, typed


class Hollow:
    """What a scan gives for a tensor: its storage is never read."""


@functools.cache
def dtypes() -> dict[str, Any]:
    """torch's dtypes by the name a pickle gives them (``torch.float32``): values, never called."""
    import torch

    return {name: v for name, v in vars(torch).items() if isinstance(v, torch.dtype)}


@functools.cache
def storage_kinds() -> dict[tuple[str, str], StorageKind]:
    """torch's storage types by the name a persistent id gives them, with their dtype."""
    import torch

    kinds = {("torch", "UntypedStorage"): StorageKind("torch.UntypedStorage", torch.uint8),
             ("torch.storage", "UntypedStorage"): StorageKind("torch.storage.UntypedStorage", torch.uint8)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage's deprecation note, on reading each class's dtype
        for name in dir(torch):
            cls = getattr(torch, name)
            if (name.endswith("Storage") and isinstance(cls, type) and issubclass(cls, torch.storage.TypedStorage)
                    and cls is not torch.storage.TypedStorage and not name.startswith("Q")):
                kinds[("torch", name)] = StorageKind(f"torch.{name}", cls.dtype)
    return kinds
