"""Optional libraries: which extra of mtk installs each, and the one line a verb says when one is missing.

The core (validate, render, Slurm) needs pydantic, PyYAML, Jinja2 and click only; the Docker SDK, the Kubernetes
client, boto3, matplotlib, ... come with extras. A missing one is a set-up problem the user fixes with one
command, so it is reported as bad input (exit 2, one line naming the extra and the command), never as an
"internal error". Verbs import such libraries inside :func:`requires`; :func:`explain` is the error boundary's
safety net for any other import of a library listed here. Imports nothing heavy (the CLI's start-up path uses it).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from mtk.exitcodes import BadInput

# Top-level module -> (extra that installs it, what it is for the user).
EXTRA_OF: dict[str, tuple[str, str]] = {
    "docker": ("image", "the Docker SDK"),
    "spython": ("image", "spython (Apptainer definitions)"),
    "kubernetes": ("eks", "the Kubernetes client"),
    "matplotlib": ("report", "matplotlib (report plots)"),
    "safetensors": ("convert", "safetensors"),
    "tqdm": ("convert", "tqdm"),
    "tokenizers": ("convert", "tokenizers"),
    "sentencepiece": ("convert", "sentencepiece"),
    "transformers": ("hf", "transformers"),
    "tiktoken": ("data", "tiktoken"),
    "zstandard": ("data", "zstandard"),
    "pyarrow": ("data", "pyarrow (Parquet corpora)"),
    "torch": ("train", "torch"),
    "megatron": ("train", "megatron-core"),
    "numpy": ("train", "numpy"),
    "psutil": ("train", "psutil"),
    "tensorboard": ("train", "tensorboard"),
    "etcd": ("train", "python-etcd"),
    # boto3 serves two extras (image: ECR pushes, data: s3:// corpora); the data step's imports name theirs.
    "boto3": ("image", "boto3"),
    "botocore": ("image", "boto3"),
}


class MissingExtra(BadInput, ImportError):
    """An optional library is not installed: bad set-up, exit 2, one line with the install command."""


def install_command(extra: str) -> str:
    return f"pip install 'mtk[{extra}]'"


def message(module: str, extra: str, needed_for: str = "") -> str:
    """``needed_for``: the verb or step, e.g. "mtk build-image" (empty: the library is named alone)."""
    what = EXTRA_OF.get(module, ("", module))[1]
    who = f"{needed_for} needs {what}" if needed_for else f"{what} is needed"
    return (f"{who} ({module}), not installed in this Python ({sys.executable}): {install_command(extra)} "
            f"(in an mtk checkout `make demo` installs it)")


def explain(exc: ModuleNotFoundError, extra: str | None = None, needed_for: str = "") -> MissingExtra | None:
    """The one-line error for a missing optional library, or None when ``exc`` is about some other module (a bug
    in mtk's own imports stays an internal error)."""
    top = (exc.name or "").split(".")[0]
    if extra is None:
        extra = EXTRA_OF.get(top, ("", ""))[0]
    if not extra or not top or top == "mtk":
        return None
    return MissingExtra(message(top, extra, needed_for))


@contextlib.contextmanager
def requires(extra: str, needed_for: str = "") -> Iterator[None]:
    """Wrap the imports of an optional library: a ModuleNotFoundError inside becomes :class:`MissingExtra`.

    ``with requires("image", "mtk build-image"): import docker``
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        explained = explain(exc, extra, needed_for)
        if explained is None:
            raise
        raise explained from None


def missing(modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` cannot be imported here (checked without importing them)."""
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]
