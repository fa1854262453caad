"""Build a JSONL corpus of real text from files already on this machine (no download).

Sources, in order: man pages (raw roff, all languages), ``/usr/share/doc`` text files (plain or .gz),
and the Python standard library sources. One document per file, ``{"text": ...}`` per line, until the
target size is reached. Deterministic: files are walked in sorted order.

    python benchmarks/build_corpus.py OUT.jsonl [--mb 100]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

MAX_DOC = 2 << 20  # skip giant files so the corpus stays varied


def _files(root: Path, suffixes: tuple[str, ...] | None = None) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            if suffixes is None or name.endswith(suffixes):
                yield path


def _read_text(path: Path) -> str | None:
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if not raw or len(raw) > MAX_DOC or b"\x00" in raw[:4096]:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def sources() -> Iterator[Path]:
    yield from _files(Path("/usr/share/man"))
    yield from _files(Path("/usr/share/doc"))
    yield from _files(Path(sysconfig.get_paths()["stdlib"]), (".py", ".txt", ".rst"))


def build(out: str, target_mb: float) -> tuple[int, int]:
    """Write documents until ``target_mb`` MiB of JSONL; returns (docs, bytes)."""
    target = int(target_mb * (1 << 20))
    docs = size = 0
    tmp = f"{out}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        for path in sources():
            text = _read_text(path)
            if not text:
                continue
            line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
            fh.write(line)
            docs += 1
            size += len(line.encode("utf-8"))
            if size >= target:
                break
    os.replace(tmp, out)
    return docs, size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=100.0)
    args = ap.parse_args(argv)
    docs, size = build(args.out, args.mb)
    print(f"wrote {args.out}: {docs} docs, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
