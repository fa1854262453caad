"""The Kubeflow training operator's PyTorchJob CRD schema (v1.9.0, vendored under tests/unit/k8s/schemas), strict.

Where the schema lists properties, no others are allowed: the API server would silently prune an unknown field,
so a typo would vanish instead of failing.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import jsonschema
import yaml

CRD = Path(__file__).resolve().parents[1] / "unit" / "k8s" / "schemas" / "kubeflow.org_pytorchjobs-v1.9.0.yaml"


@functools.cache
def pytorchjob_validator() -> jsonschema.Draft7Validator:
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema = copy.deepcopy(next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"])

    def strict(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                strict(value)
        elif isinstance(node, list):
            for value in node:
                strict(value)

    strict(schema)
    return jsonschema.Draft7Validator(schema)
