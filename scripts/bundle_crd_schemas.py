"""Write k8s/schemas/*.json: the CRD schemas that `mtk render`/`validate`/`launch` check rendered custom resources
against offline, each the openAPIV3Schema of a CRD vendored for the tests under tests/unit/k8s/schemas, with its
descriptions left out (a tenth of the size):

- pytorchjob-v1.json: kubeflow.org_pytorchjobs-v1.9.0.yaml (Kubeflow training-operator v1.9.0, Apache-2.0);
- trainjob-v1alpha1.json, trainingruntime-v1alpha1.json: trainer.kubeflow.org_{trainjobs,trainingruntimes}-v2.3.0.yaml
  (Kubeflow Trainer v2.3.0, manifests/base/crds, Apache-2.0). The TrainingRuntime's embeds JobSet v0.12's JobSetSpec.

tests/unit/k8s/test_manifest_check.py runs this with --check and fails when a bundled file no longer matches its
vendored CRD.

    python scripts/bundle_crd_schemas.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
VENDORED = ROOT / "tests" / "unit" / "k8s" / "schemas"
OUT = ROOT / "k8s" / "schemas"
# (vendored CRD, version, bundled file, where it comes from)
BUNDLES = [
    ("kubeflow.org_pytorchjobs-v1.9.0.yaml", "v1", "pytorchjob-v1.json", "Kubeflow training-operator v1.9.0"),
    ("trainer.kubeflow.org_trainjobs-v2.3.0.yaml", "v1alpha1", "trainjob-v1alpha1.json", "Kubeflow Trainer v2.3.0"),
    ("trainer.kubeflow.org_trainingruntimes-v2.3.0.yaml", "v1alpha1", "trainingruntime-v1alpha1.json",
     "Kubeflow Trainer v2.3.0"),
]


def _strip(node):
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def bundled_text(crd_file: str, version_name: str, project: str) -> str:
    docs = yaml.load_all((VENDORED / crd_file).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    crd = next(d for d in docs if d and d.get("kind") == "CustomResourceDefinition")
    version = next(v for v in crd["spec"]["versions"] if v["name"] == version_name)
    source = (f"{crd_file} ({project}, Apache-2.0), spec.versions[{version_name}].schema.openAPIV3Schema without "
              "descriptions; regenerate with scripts/bundle_crd_schemas.py")
    doc = {"source": source, "group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"],
           "version": version_name, "openAPIV3Schema": _strip(version["schema"]["openAPIV3Schema"])}
    return json.dumps(doc, sort_keys=True, indent=None, separators=(",", ":")) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for crd_file, version, out_name, project in BUNDLES:
        text, out = bundled_text(crd_file, version, project), OUT / out_name
        if "--check" in argv:
            if not out.exists() or out.read_text() != text:
                stale.append(f"{out.relative_to(ROOT)} differs from {(VENDORED / crd_file).relative_to(ROOT)}")
            continue
        out.write_text(text)
        print(out)
    if stale:
        print("; ".join(stale) + ": run python scripts/bundle_crd_schemas.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
