"""The one error boundary of ``mtk`` and ``mtk-entrypoint``: expected failures become one message naming the
file, field or line and the fix; bad input exits 2, a failed run 1. Tracebacks only with ``--debug`` or
``MTK_DEBUG=1``. Imports nothing heavy (the CLI's start-up path uses it)."""

from __future__ import annotations

import os
import sys
import traceback

from .exitcodes import FAILED, INTERRUPTED, USAGE, UserFacingError


def debug_enabled() -> bool:
    return os.environ.get("MTK_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def classify(exc: BaseException) -> tuple[int, str] | None:
    """(exit code, message) for an expected failure; None for a bug (whose traceback someone must see)."""
    if isinstance(exc, UserFacingError):  # a spec's problems (SpecError), a missing run, a refused filter, ...
        return int(exc.exit_code), str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED, "interrupted"
    if isinstance(exc, ModuleNotFoundError):
        from .extras import explain

        missing = explain(exc)
        if missing is not None:  # an optional library (docker, kubernetes, ...): set-up, not a bug
            return USAGE, str(missing)
    if isinstance(exc, OSError) and (exc.filename or exc.strerror):
        where = f"{exc.filename}: " if exc.filename else ""
        other = f" -> {exc.filename2}" if exc.filename2 else ""
        return USAGE, f"{where}{exc.strerror or exc}{other}{_os_hint(exc)}"
    if isinstance(exc, UnicodeDecodeError):
        return USAGE, f"a file is not UTF-8 text ({exc.reason} at byte {exc.start})"
    return None


def _os_hint(exc: OSError) -> str:
    import errno

    return {
        errno.ENOTDIR: "; a parent of this path is a file, not a directory: choose another path",
        errno.EEXIST: "; it already exists: choose another path or remove it",
        errno.EACCES: "; no permission: choose a location you can write, or fix its permissions",
        errno.EROFS: "; the filesystem is read-only: choose a writable location",
        errno.ENOSPC: "; the disk is full: free space or choose another location",
        errno.EISDIR: "; a directory is in the way: pass a file path",
    }.get(exc.errno or 0, "")


def report(exc: BaseException, prog: str, scrub_values: tuple[str, ...] = ()) -> int:
    """Print one line (or the spec's problem list) for ``exc`` and return the exit code. With debug on, or
    for a bug, the traceback too — scrubbed of secret values either way."""
    from .secrets import held, scrub, secret_values

    values = tuple(secret_values(os.environ) | held()) + scrub_values
    known = classify(exc)
    if known is None or debug_enabled():
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write(scrub(text, values))
    if known is None:
        sys.stderr.write(scrub(f"{prog}: internal error: {type(exc).__name__}: {exc}\n", values))
        if not debug_enabled():
            sys.stderr.write("(this is a bug in mtk; the traceback above helps whoever fixes it)\n")
        return FAILED
    code, message = known
    sys.stderr.write(scrub(f"{prog}: error: {message}\n" if prog != "mtk" else f"error: {message}\n", values))
    return code
