"""The manifests are checked strictly and offline (#46): the PyTorchJob against the training operator's CRD schema
bundled in the package, it and every core object against Kubernetes' own schemas (the kubernetes client's typed
models). Each deliberately broken manifest below is refused as one line naming the object, the field path and the
fix, and is refused by the reference validators too (kubernetes-validate, jsonschema over the vendored CRD), so
the offline check agrees with them; every rendered example passes both."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import kubernetes
import kubernetes_validate
import pytest
from mtk.k8s import manifest_check, object_schema, yamlio
from mtk.k8s.backend import ALL_FILE, EksBackend
from mtk.k8s.manifest_check import ManifestInvalid
from support import k8s_schema

ROOT = Path(__file__).resolve().parents[3]
RUN_DIR = "/fsx/runs/tiny-eks-20261122-010203"


def _objs(job) -> list[dict]:
    return yamlio.load_all(EksBackend().render(job, RUN_DIR).files[ALL_FILE])


def _check(objs):
    return manifest_check.check([(ALL_FILE, o) for o in objs])


def _reference_refuses(body: dict) -> bool:
    """kubernetes-validate (strict) for a core object, the vendored CRD made strict for a PyTorchJob."""
    if body["kind"] == "PyTorchJob":
        return bool(list(k8s_schema.pytorchjob_validator().iter_errors(body)))
    try:
        kubernetes_validate.validate(body, "1.32", strict=True)
    except kubernetes_validate.ValidationError:
        return True
    return False


def test_the_bundled_crd_schemas_are_the_vendored_ones():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bundle_crd_schemas.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("rendezvous", ["c10d", "etcd"])
def test_every_rendered_object_passes(example_7b, tiny_eks, rendezvous):
    for job in (example_7b, tiny_eks()):
        job.cluster.eks.rendezvous = rendezvous
        objs = _objs(job)
        assert {o["kind"] for o in objs} >= {"ConfigMap", "Service", "PyTorchJob"}
        assert "against Kubernetes' own schemas" in _check(objs)
        assert not [o for o in objs if _reference_refuses(o)]


def _ptj(objs):
    return next(o for o in objs if o["kind"] == "PyTorchJob")


def _container(objs, kind="PyTorchJob"):
    o = next(o for o in objs if o["kind"] == kind)
    template = o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] if kind == "PyTorchJob" else o["spec"][
        "template"]
    return template["spec"]["containers"][0]


# (what is broken, how, the object's kind, the field path's end, the message). kubernetes-validate types a Quantity
# as any string, so it accepts 'lots'; the API server parses it and refuses (as mtk does): QUANTITY_CASE.
BROKEN = [
    ("a typo in a container field", lambda objs: _container(objs).update(imagePullPolcy="Always"),
     "PyTorchJob", "containers[0].imagePullPolcy", "unknown field (the API server would drop it); did you mean "
     "'imagePullPolicy'?"),
    ("an integer where the CRD wants a string", lambda objs: _ptj(objs)["spec"].update(nprocPerNode=8),
     "PyTorchJob", "spec.nprocPerNode", "must be a string, not an integer"),
    ("a field the CRD does not know", lambda objs: _ptj(objs)["spec"]["runPolicy"].update(cleanupPolicy="All"),
     "PyTorchJob", "spec.runPolicy.cleanupPolicy", "did you mean 'cleanPodPolicy'?"),
    ("a quantity that is none", lambda objs: _container(objs, "Job")["resources"]["requests"].update(cpu="lots"),
     "Job", "resources.requests.cpu", "must be a quantity"),
    ("a required field missing", lambda objs: _container(objs, "Job").pop("name"),
     "Job", "containers[0].name", "is required and missing"),
    ("a string where an integer goes", lambda objs: next(o for o in objs if o["kind"] == "Job")["spec"].update(
        backoffLimit="2"), "Job", "spec.backoffLimit", "must be an integer, not a string"),
    ("a ConfigMap value that is no string", lambda objs: objs[0]["data"].update(n=1),
     "ConfigMap", "data.n", "must be a string, not an integer"),
    ("a pod-template typo only Kubernetes' schema sees", lambda objs: _ptj(objs)["spec"]["pytorchReplicaSpecs"][
        "Worker"]["template"]["spec"].update(hostNetwrk=True), "PyTorchJob", "template.spec.hostNetwrk",
     "did you mean 'hostNetwork'?"),
]


@pytest.mark.parametrize(("what", "breaks", "kind", "path", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_manifest_is_one_error_naming_object_field_and_fix(example_7b, what, breaks, kind, path, message):
    objs = _objs(example_7b)
    breaks(objs)
    broken = next(o for o in objs if o["kind"] == kind and not _check_one(o))
    with pytest.raises(ManifestInvalid) as caught:
        _check(objs)
    line = str(caught.value)
    assert "\n" not in line and caught.value.exit_code == 2
    assert line.startswith(f"{ALL_FILE}: {kind}/{broken['metadata']['name']}: ")
    assert f"{path}: " in line and message in line and "please report it" in line, line
    assert _reference_refuses(broken) or what == QUANTITY_CASE, f"{what}: the reference accepts what mtk refuses"


QUANTITY_CASE = "a quantity that is none"


def _check_one(body) -> bool:
    return not manifest_check.problems(body)


def test_a_spec_field_written_verbatim_names_that_field(tiny_eks):
    objs = _objs(tiny_eks(cluster={"eks": {"tolerations": [{"key": "gpu", "efect": "NoSchedule"}]}}))
    with pytest.raises(ManifestInvalid, match=r"^manifests/all.yaml: \w+/tiny-eks-20261122-010203(-etcd)?: spec\."
                                              r"(\S+\.)?template\.spec\.tolerations\[0\]\.efect: unknown field "
                                              r".*did you mean 'effect'\?; fix cluster\.eks\.tolerations in the spec"):
        _check(objs)


def test_without_the_kubernetes_client_the_crd_is_still_checked_and_the_rest_said(tiny_eks, monkeypatch):
    monkeypatch.setattr(object_schema, "available", lambda: False)
    objs = _objs(tiny_eks())
    assert "need the kubernetes client" in _check(objs)
    _ptj(objs)["spec"]["nprocPerNode"] = 2
    with pytest.raises(ManifestInvalid, match=r"spec\.nprocPerNode: must be a string"):
        _check(objs)


def test_quantity_fields_are_kubernetes_own():
    """The models type a Quantity as a string; object_schema.QUANTITY names those fields. Kept equal to the
    Quantity fields of Kubernetes' published schema (kubernetes-validate's copy, the client's version) over every
    model the checked kinds reach."""
    import re

    import kubernetes.client.models as models

    minor = kubernetes.__version__.split(".")[0]
    defs_file = (Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v1.{minor}.0-local-strict"
                 / "_definitions.json")
    defs = json.loads(defs_file.read_text())["$defs"]
    reached: set[str] = set()

    def walk(name: str) -> None:
        if name not in reached and hasattr(models, name):
            reached.add(name)
            for t in getattr(models, name).openapi_types.values():
                for sub in re.findall(r"\b[A-Z]\w+\b", t):
                    walk(sub)

    for model in [*object_schema.KINDS.values(), object_schema.POD_TEMPLATE]:
        walk(model)
    quantities = set()
    for def_name, schema in defs.items():
        version, kind = def_name.split(".")[-2:]
        model = version[0].upper() + version[1:] + kind
        for prop, sub in (schema.get("properties") or {}).items():
            refs = [sub.get("$ref", ""), (sub.get("items") or {}).get("$ref", "")]
            if isinstance(sub.get("additionalProperties"), dict):
                refs.append(sub["additionalProperties"].get("$ref", ""))
            if model in reached and any(r.endswith("resource.Quantity") for r in refs):
                quantities.add((model, prop))
    assert quantities == set(object_schema.QUANTITY)


def test_the_cli_refuses_before_writing_and_validate_too(tmp_path):
    sets = ["--set", "cluster.eks.tolerations=[{key: gpu, efect: NoSchedule}]"]
    spec = str(ROOT / "examples" / "gpt-7.5b-p5-eks.yaml")
    for verb in (["render", spec, "--out", str(tmp_path / "out")], ["validate", spec, "-q", "--no-megatron"]):
        out = subprocess.run([sys.executable, "-m", "mtk", *verb, *sets], capture_output=True, text=True,
                             cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        error = out.stderr.strip().splitlines()[-1]
        assert error.startswith("error: manifests/all.yaml: Job/gpt-7-5b-p5-") and "-getdata: spec.template.spec." \
            "tolerations[0].efect: unknown field" in error and "fix cluster.eks.tolerations" in error, out.stderr
    assert not (tmp_path / "out").exists()
    ok = subprocess.run([sys.executable, "-m", "mtk", "validate", spec, "-q", "--no-megatron"], capture_output=True,
                        text=True, cwd=tmp_path)
    assert ok.returncode == 0 and "note: manifests checked offline" in ok.stdout, ok.stderr


def test_submit_checks_before_applying_anything(tiny_eks):
    """A launch refuses a broken manifest before the first API call (the client factory is never asked)."""
    backend = EksBackend(kube_factory=lambda ns: pytest.fail("an API call before the check"), say=lambda m: None)
    art = EksBackend().render(tiny_eks(), RUN_DIR)
    objs = yamlio.load_all(art.files[ALL_FILE])
    _ptj(objs)["spec"]["nprocPerNode"] = 2
    broken = dataclasses.replace(art, files={**art.files, ALL_FILE: yamlio.dump_all(objs)})
    with pytest.raises(ManifestInvalid, match=r"spec\.nprocPerNode"):
        backend.submit(tiny_eks(), broken)
