"""A stand-in for PyTorch's CPU wheel index on this machine (no route to the real one): a PEP 503 "simple" index
over HTTP on 127.0.0.1 that serves the torch wheel this machine keeps on disk, exactly as the real index serves
it (a link per file, named by its URL-quoted filename, with its sha256 in the fragment). ``scripts/install-deps.sh``
downloads from it the way it downloads from the real index on a fresh machine (``MTK_TORCH_INDEX``)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MACHINE_WHEELS = Path("/opt/wheels")  # where this project's machines keep the torch CPU wheel (install-deps.sh)


def machine_torch_wheel() -> Path:
    found = sorted(MACHINE_WHEELS.glob("torch-*+cpu-*.whl"))
    assert found, f"no torch CPU wheel in {MACHINE_WHEELS}: the stand-in index has nothing to serve"
    return found[-1]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextmanager
def torch_index(root: Path, wheel: Path | None = None) -> Iterator[str]:
    """Serve ``wheel`` (default: the machine's) under ``root``; yields the index URL (``…/simple``)."""
    wheel = wheel or machine_torch_wheel()
    files, project = root / "files", root / "simple" / "torch"
    files.mkdir(parents=True, exist_ok=True)
    project.mkdir(parents=True, exist_ok=True)
    served = files / wheel.name
    if not served.exists():
        served.symlink_to(wheel)
    href = f"../../files/{urllib.parse.quote(wheel.name)}#sha256={_sha256(wheel)}"
    (project / "index.html").write_text(f'<!DOCTYPE html>\n<html><body><a href="{href}">{wheel.name}</a>\n'
                                        "</body></html>\n")
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
