#!/usr/bin/env python3
"""Regenerate the committed lock files (`make lock`): the only step that asks the registry for new versions.

pyproject.toml stays the one list of what mtk needs. This script flattens its extras into a requirement list,
resolves it with uv for this machine's Python (3.11) and writes pinned, hashed lock files under requirements/.
megatron-core is the exception: it declares Requires-Python >=3.12 although its cp311 wheel works, so no
resolver accepts it on 3.11. It is left out of the resolution (its own requirements stay in) and pinned, with
the hashes PyPI publishes for it, in requirements/megatron-core.txt, which install-deps.sh installs alone
with --no-deps --ignore-requires-python.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "requirements"
# torch comes from the CPU wheel on this machine kind's disk; any other torch spec pulls CUDA wheels.
TORCH = "torch==2.13.0+cpu"
TORCH_WHEELS = "/opt/wheels"
PYTHON_VERSION = "3.11"
# Tools the environment itself needs: pip (tests build wheels and targets with it), setuptools + wheel (mtk's
# editable install without build isolation), uv (the installer; a sync would otherwise remove it).
TOOLING = ["pip", "setuptools>=68", "wheel", "uv"]
# (lock file, extras it covers). The demo lock is resolved inside the test lock, so both agree on versions.
# The demo set carries what the README's commands use: training, preprocessing, `mtk report`'s plots, `mtk convert`
# and transformers to load its output, and the small clients of `mtk build-image` (Docker SDK) and
# `mtk launch --backend eks` (Kubernetes): every verb of the README runs in the Quick start's environment.
LOCKS = [("test.lock", ["all", "test"]),
         ("demo.lock", ["train", "data", "report", "convert", "hf", "image", "eks"])]
SPECIAL = "megatron-core"
INDEX = "https://pypi.org/simple"


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def requirements(extras: list[str]) -> list[str]:
    """The requirements of mtk with these extras, self-references (``mtk[a,b]``) expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    out, seen, todo = list(project["dependencies"]), set(), list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in optional[extra]:
            match = re.fullmatch(r"mtk\[([^\]]+)\]", req.replace(" ", ""))
            if match:
                todo.extend(match.group(1).split(","))
            else:
                out.append(req)
    return sorted(set(out), key=str.lower)


def megatron_core_pin(reqs: list[str]) -> str | None:
    pins = [r for r in reqs if _name(r) == SPECIAL]
    if not pins:
        return None
    match = re.fullmatch(r"megatron-core==([\w.]+)", pins[0].replace(" ", ""))
    if not match:
        sys.exit(f"pyproject.toml must pin megatron-core exactly (==X.Y.Z), got {pins[0]!r}")
    return match.group(1)


def write_megatron_core(version: str) -> list[str]:
    """Pin megatron-core with every file hash the index lists for it; return its own requirements."""
    request = urllib.request.Request(f"{INDEX}/{SPECIAL}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        listed = json.load(resp)["files"]
    files = [f for f in listed if f"-{version}-" in f["filename"] and f["filename"].endswith(".whl")]
    if not files:
        sys.exit(f"{SPECIAL}=={version}: no wheels on the index")
    hashes = sorted(f["hashes"]["sha256"] for f in files)
    wheel = next((f for f in files if f"cp{PYTHON_VERSION.replace('.', '')}-" in f["filename"]), files[0])
    with urllib.request.urlopen(wheel["url"], timeout=300) as resp, zipfile.ZipFile(io.BytesIO(resp.read())) as whl:
        metadata = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    deps = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    lines = [f"# {SPECIAL}, pinned: installed alone with --no-deps --ignore-requires-python ({Path(__file__).name}).",
             f"{SPECIAL}=={version} \\"]
    lines += [f"    --hash=sha256:{h} \\" for h in hashes[:-1]] + [f"    --hash=sha256:{hashes[-1]}"]
    (OUT / "megatron-core.txt").write_text("\n".join(lines) + "\n")
    return deps


def compile_lock(name: str, reqs: list[str], constraint: Path | None) -> None:
    # The input gets a fixed name, run from its folder, so the lock's "# via -r pyproject-extras.in" comments do
    # not change with every re-lock.
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "pyproject-extras.in").write_text("\n".join(reqs) + "\n")
        cmd = ["uv", "pip", "compile", "pyproject-extras.in", "--quiet", "--generate-hashes", "--python-version",
               PYTHON_VERSION, "--find-links", TORCH_WHEELS, "--no-header", "-o", str(OUT / name)]
        if constraint:
            cmd += ["--constraint", str(constraint)]
        subprocess.run(cmd, check=True, cwd=tmp)
    body = (OUT / name).read_text()
    header = (f"# {name}: generated by `make lock` (scripts/lock.py) from pyproject.toml; do not edit by hand.\n"
              f"# Python {PYTHON_VERSION}; torch from {TORCH_WHEELS}; megatron-core is in megatron-core.txt.\n")
    (OUT / name).write_text(header + body)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for i, (name, extras) in enumerate(LOCKS):
        reqs = requirements(extras)
        version = megatron_core_pin(reqs)
        reqs = [r for r in reqs if _name(r) not in (SPECIAL, "torch")] + [TORCH] + TOOLING
        if version:
            reqs += [d for d in write_megatron_core(version) if _name(d) != "torch"]
        compile_lock(name, reqs, OUT / LOCKS[0][0] if i else None)
        print(f"wrote requirements/{name}")


if __name__ == "__main__":
    main()
