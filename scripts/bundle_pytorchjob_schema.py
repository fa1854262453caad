"""Write k8s/schemas/pytorchjob-v1.json: the PyTorchJob CRD's v1 openAPIV3Schema that `mtk render`/`validate` check
rendered PyTorchJobs against offline, taken from the CRD vendored for the tests (Kubeflow training operator v1.9.0,
Apache-2.0) with its descriptions left out (67 KB instead of 600). tests/unit/k8s/test_manifest_check.py runs this
with --check and fails when the bundled file no longer matches the vendored CRD.

    python scripts/bundle_pytorchjob_schema.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "tests" / "unit" / "k8s" / "schemas" / "kubeflow.org_pytorchjobs-v1.9.0.yaml"
OUT = ROOT / "k8s" / "schemas" / "pytorchjob-v1.json"
SOURCE = ("kubeflow.org_pytorchjobs-v1.9.0.yaml (Kubeflow training-operator v1.9.0, Apache-2.0), spec.versions[v1]"
          ".schema.openAPIV3Schema without descriptions; regenerate with scripts/bundle_pytorchjob_schema.py")


def _strip(node):
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def bundled_text() -> str:
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    doc = {"source": SOURCE, "group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": "v1",
           "openAPIV3Schema": _strip(version["schema"]["openAPIV3Schema"])}
    return json.dumps(doc, sort_keys=True, indent=None, separators=(",", ":")) + "\n"


def main(argv: list[str]) -> int:
    text = bundled_text()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} differs from {CRD.relative_to(ROOT)}: run "
                  "python scripts/bundle_pytorchjob_schema.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
