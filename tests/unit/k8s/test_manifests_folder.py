"""``kubectl apply -f manifests/`` (and ``-R``) creates each object of a run once, in apply order (#46).

kubectl reads every ``.json``, ``.yaml`` and ``.yml`` file of a folder (``-R``: of its sub-folders too) in lexical
order, each file's documents in order. The objects are counted by kind/name over exactly those files of a written
render; tests/integration/k8s/test_k8s_apply.py runs the real kubectl on the folder against the API stand-in.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from mtk.k8s import yamlio
from mtk.k8s.backend import EksBackend

KUBECTL_EXTENSIONS = (".json", ".yaml", ".yml")  # kubectl's FileExtensions for a folder


def kubectl_reads(folder: Path, recursive: bool) -> list[Path]:
    """The files ``kubectl apply -f folder`` (``-R``) reads, in its order (a walk in lexical order)."""
    found = sorted(folder.rglob("*") if recursive else folder.iterdir())
    return [p for p in found if p.is_file() and p.suffix in KUBECTL_EXTENSIONS]


def _written(tmp_path: Path, job) -> Path:
    run_dir = tmp_path / "tiny-eks-20261122-010203"
    EksBackend().render(job, str(run_dir)).write()
    return run_dir


@pytest.mark.parametrize("recursive", [False, True], ids=["-f", "-R -f"])
@pytest.mark.parametrize("rendezvous", ["c10d", "etcd"])
def test_each_object_once_in_apply_order(tmp_path, example_7b, recursive, rendezvous):
    example_7b.cluster.eks.rendezvous = rendezvous
    run_dir = _written(tmp_path, example_7b)
    applied = [(o["kind"], o["metadata"]["name"])
               for f in kubectl_reads(run_dir / "manifests", recursive) for o in yamlio.load_all(f.read_text())]
    every = {(o["kind"], o["metadata"]["name"])
             for f in kubectl_reads(run_dir, True) if f.suffix == ".yaml" for o in yamlio.load_all(f.read_text())}
    assert Counter(applied) == Counter(every) and set(Counter(applied).values()) == {1}, Counter(applied)
    kinds = [kind for kind, _ in applied]
    # The spec ConfigMap every pod mounts first, the data Jobs before the PyTorchJob that waits for their output.
    assert kinds[0] == "ConfigMap" and kinds[-1] == "PyTorchJob"
    assert kinds.index("Job") < kinds.index("PyTorchJob")
    assert ("Deployment" in kinds) == (rendezvous == "etcd")


def test_the_step_files_hold_the_same_objects_outside_the_folder(tmp_path, example_7b):
    run_dir = _written(tmp_path, example_7b)
    steps = [o for f in kubectl_reads(run_dir / "steps", False) for o in yamlio.load_all(f.read_text())]
    folder = [o for f in kubectl_reads(run_dir / "manifests", True) for o in yamlio.load_all(f.read_text())]
    assert sorted(map(str, steps)) == sorted(map(str, folder))
    assert not (run_dir / "manifests" / "steps").exists()
