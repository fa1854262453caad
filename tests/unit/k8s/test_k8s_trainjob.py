"""``cluster.eks.operator: trainjob`` (issue 51 item 1): a TrainJob on Kubeflow Trainer v2, around the same training
pod as the PyTorchJob. The render is held to Kubeflow Trainer's own typed API models (kubeflow-trainer-api 2.3.0:
every field name and type, round-tripped) and to its CRDs and webhook rules (mtk's offline check); the pods the
Trainer and JobSet would make of it (tests/support/trainer_env.py) drive mtk's node-side code to a static
rendezvous from the torch plugin's PET_* variables; ``auto`` picks by what the API server serves."""

from __future__ import annotations

import copy

import pytest
from kubeflow_trainer_api.models import JobsetV1alpha2JobSet, TrainerV1alpha1TrainingRuntime, TrainerV1alpha1TrainJob
from mtk.k8s import manifest_check, manifests, names, operator_choice, yamlio
from mtk.k8s.backend import ALL_FILE, EksBackend
from mtk.k8s.manifest_check import ManifestInvalid
from support import trainer_env

from mtk.netenv import efa_count, network_env
from mtk.spec.errors import SpecError
from mtk.spec.loader import validate

RUN_DIR = "/fsx/runs/gpt-7-5b-p5-20261201-000000"
TRAINER = ("TrainingRuntime", "TrainJob")


def _bodies(job, operator="trainjob", run_dir=RUN_DIR) -> dict[str, dict]:
    return {o.body["kind"] if o.body["kind"] in (*TRAINER, "PyTorchJob") else f"{o.body['kind']}:{o.step}": o.body
            for o in manifests.build(job, run_dir, operator)}


def _trainer_pod(runtime: dict) -> dict:
    (node_job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return node_job["template"]["spec"]["template"]["spec"]


def _round_trip(model, body: dict) -> dict:
    """Trainer's model of the object, back to a dict: a field it does not know is dropped, a wrong type raises."""
    return model.from_dict(copy.deepcopy(body)).to_dict()


def _7b(example_7b, **eks):
    job = example_7b.model_copy(deep=True)
    for key, value in {"operator": "trainjob", **eks}.items():
        setattr(job.cluster.eks, key, value)
    return job


def test_the_render_is_what_kubeflow_trainers_own_models_accept(example_7b):
    job = _7b(example_7b, node_selector={"pool": "p5"}, service_account="trainer", image_pull_secrets=["ecr"],
              tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    job.cluster.exclude_nodes = ["ip-10-1-2-3.us-west-2.compute.internal"]
    job.cluster.secrets = [{"name": "HF_TOKEN"}]
    bodies = _bodies(job)
    assert _round_trip(TrainerV1alpha1TrainJob, bodies["TrainJob"]) == bodies["TrainJob"]
    assert _round_trip(TrainerV1alpha1TrainingRuntime, bodies["TrainingRuntime"]) == bodies["TrainingRuntime"]
    # What the Trainer makes of them is a JobSet its models accept too.
    js = trainer_env.jobset(bodies["TrainJob"], bodies["TrainingRuntime"])
    assert _round_trip(JobsetV1alpha2JobSet, js) == js
    # Not vacuous: a misspelt field vanishes in the round trip, a wrong type is refused.
    typo = copy.deepcopy(bodies["TrainJob"])
    typo["spec"]["trainer"]["numNode"] = typo["spec"]["trainer"].pop("numNodes")
    assert _round_trip(TrainerV1alpha1TrainJob, typo) != typo
    wrong = copy.deepcopy(bodies["TrainingRuntime"])
    wrong["spec"]["mlPolicy"]["numNodes"] = "2"
    with pytest.raises(ValueError):
        _round_trip(TrainerV1alpha1TrainingRuntime, wrong)


def test_a_trainjob_of_the_runs_own_runtime_with_the_training_pod_and_nothing_of_the_pytorchjob(example_7b):
    job = _7b(example_7b)
    bodies = _bodies(job)
    run = names.run_id(RUN_DIR)
    assert list(bodies) == ["ConfigMap:spec", "Job:getdata", "Job:preprocess", "NetworkPolicy:train", *TRAINER]
    assert not {"PyTorchJob", "Deployment:etcd", "Service:train"} & set(bodies), "no PyTorchJob, etcd or rdzv Service"
    trainjob, runtime = bodies["TrainJob"], bodies["TrainingRuntime"]
    assert trainjob["apiVersion"] == runtime["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert trainjob["spec"] == {"runtimeRef": {"name": runtime["metadata"]["name"], "apiGroup": "trainer.kubeflow.org",
                                               "kind": "TrainingRuntime"},
                                "trainer": {"numNodes": job.cluster.nodes, "numProcPerNode": 8}}
    assert runtime["spec"]["mlPolicy"] == {"numNodes": job.cluster.nodes, "torch": {}}
    js_spec = runtime["spec"]["template"]["spec"]
    assert js_spec["failurePolicy"] == {"maxRestarts": job.cluster.eks.max_restarts}  # the gang restarts together
    (node_job,) = js_spec["replicatedJobs"]
    assert node_job["name"] == "node" and node_job["replicas"] == 1
    assert node_job["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    assert node_job["template"]["spec"] == {**node_job["template"]["spec"], "completionMode": "Indexed",
                                            "parallelism": 2, "completions": 2, "backoffLimit": 0}
    pod = _trainer_pod(runtime)
    assert node_job["template"]["spec"]["template"]["metadata"]["labels"][names.LABEL_RUN] == run
    (c,) = pod["containers"]
    assert c["name"] == "node" and c["command"] == ["mtk-entrypoint", "train", "--job", "/etc/mtk/job.json",
                                                    "--run-dir", RUN_DIR]
    want = {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": efa_count(job), "hugepages-2Mi": "5120Mi"}
    assert c["resources"] == {"requests": {**want, "memory": "32000Mi"}, "limits": want}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert network_env(job, RUN_DIR).items() <= env.items() and env["FI_PROVIDER"] == "efa"
    assert not [k for k in env if k.startswith("PET_")], "PET_* are the torch plugin's to inject"
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/etc/mtk", "/fsx", "/dev/shm"}
    assert pod["restartPolicy"] == "Never", "a Job's pod: a failed one fails the gang, JobSet restarts it"
    # One pod template, two wrappers: the PyTorchJob's worker pod is the same pod but for what each operator needs.
    ptj_pod = _bodies(job, "pytorchjob")["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    ptj_container = ptj_pod["containers"][0]
    for key in ("image", "command", "securityContext", "volumeMounts", "resources"):
        assert c[key] == ptj_container[key], key
    for key in ("volumes", "nodeSelector", "terminationGracePeriodSeconds", "automountServiceAccountToken"):
        assert pod[key] == ptj_pod[key], key
    assert [i["name"] for i in pod["initContainers"]] == [i["name"] for i in ptj_pod["initContainers"]] == \
        ["wait-for-data", "preflight"]
    assert pod["initContainers"][0] == ptj_pod["initContainers"][0]


def test_the_offline_check_covers_the_trainjob_and_names_what_trainer_would_refuse(example_7b):
    bodies = list(_bodies(_7b(example_7b)).values())
    said = manifest_check.check([(ALL_FILE, b) for b in bodies])
    assert "TrainJob and TrainingRuntime against Kubeflow Trainer v2.3.0's CRD schemas" in said
    breaks = [
        ("TrainJob", lambda b: b["spec"]["trainer"].update(numNodes="2"), r"spec\.trainer\.numNodes: must be an "
                                                                          r"integer"),
        ("TrainJob", lambda b: b["spec"].update(runtimeRefs=b["spec"]["runtimeRef"]),
         r"spec\.runtimeRefs: unknown field"),
        ("TrainJob", lambda b: b["spec"]["trainer"].update(env=[{"name": "PET_NNODES", "value": "3"}]),
         r"spec\.trainer\.env\[0\]\.name: PET_NNODES is reserved"),
        ("TrainingRuntime", lambda b: _trainer_pod(b)["containers"][0].update(name="pytorch"),
         r"containers: must contain the container 'node'"),
        ("TrainingRuntime", lambda b: b["spec"]["template"]["spec"]["replicatedJobs"][0].update(replicas=2),
         r"replicatedJobs\[0\]\.replicas: always must be 1"),
        ("TrainingRuntime", lambda b: _trainer_pod(b)["containers"][0].update(imagePullPolicyy="Always"),
         r"template\.spec\.containers\[0\]\.imagePullPolicyy: unknown field"),
    ]
    for kind, breaking, message in breaks:
        broken = copy.deepcopy(bodies)
        breaking(next(b for b in broken if b["kind"] == kind))
        with pytest.raises(ManifestInvalid, match=rf"{kind}/gpt-7-5b-p5-20261201-000000: \S*{message}"):
            manifest_check.check([(ALL_FILE, b) for b in broken])


def test_the_pods_trainer_makes_of_it_reach_a_static_rendezvous_through_the_node_side_code(tiny_eks):
    """What the torch plugin injects (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK from the completion index,
    PET_MASTER_ADDR/PORT naming node 0) runs torchrun with a static rendezvous at node 0: no etcd, no c10d
    endpoint, no elastic restarts; the preflight init containers meet at node 0 on their own port."""
    from mtk.launcher.preflight import group_from_environment
    from mtk.launcher.train_step import torchrun_argv

    from mtk.rendezvous import node_place

    job = tiny_eks(cluster={"eks": {"operator": "trainjob", "rendezvous": "c10d"}})
    run_dir = "/fsx/runs/tiny-eks-20261201-000003"
    bodies = _bodies(job, run_dir=run_dir)
    js = trainer_env.jobset(bodies["TrainJob"], bodies["TrainingRuntime"])
    pods = trainer_env.pods(js)
    run = names.run_id(run_dir)
    master = f"{run}-node-0-0.{run}"
    assert manifests.trainjob_master(run) == trainer_env.master_addr(run) == master
    for rank, pod in enumerate(pods):
        env = trainer_env.container_env(pod, "node")
        assert trainer_env.command(pod, "node")[:2] == ["mtk-entrypoint", "train"]
        argv, node = torchrun_argv(job, run_dir, names.SPEC_PATH, env=env, program=["torchrun"])
        assert argv[1:11] == ["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank),
                              "--master-addr", master, "--master-port", "29500"], argv
        assert not [a for a in argv if a.startswith(("--rdzv", "--max-restarts"))]
        assert node == f"{run}-node-0-{rank}"
        place = node_place(env)
        assert (place.node_rank, place.nnodes, place.restarts_failed_containers) == (rank, 2, True)
        preflight = trainer_env.container_env(pod, "preflight")
        assert group_from_environment(preflight) == (rank, 2, master, manifests.PREFLIGHT_C10D_PORT)
        assert not [k for k in preflight if k.startswith("PET_")]


def test_auto_asks_the_cluster_and_a_render_without_one_says_what_it_did(tiny_eks):
    both = frozenset({"pytorchjob", "trainjob"})
    cases = [  # (operator, rendezvous, served) -> operator
        ("auto", "c10d", None, "pytorchjob"), ("auto", "c10d", both, "trainjob"),
        ("auto", "c10d", frozenset({"pytorchjob"}), "pytorchjob"), ("auto", "etcd", both, "pytorchjob"),
        ("auto", "c10d", frozenset({"trainjob"}), "trainjob"), ("pytorchjob", "c10d", both, "pytorchjob"),
        ("trainjob", "c10d", frozenset({"pytorchjob"}), "trainjob"),
    ]
    for operator, rendezvous, served, chosen in cases:
        job = tiny_eks(cluster={"eks": {"operator": operator, "rendezvous": rendezvous}})
        assert operator_choice.choose(job, served)[0] == chosen, (operator, rendezvous, served)
    art = EksBackend().render(tiny_eks(cluster={"eks": {"operator": "auto"}}), RUN_DIR)
    assert {o["kind"] for o in yamlio.load_all(art.files[ALL_FILE])} >= {"PyTorchJob"}
    assert any("auto and no cluster was asked: rendered a PyTorchJob" in n for n in art.notes)
    # What a launch refuses before anything is written, naming the field and the fix.
    refusals = [("trainjob", "c10d", frozenset({"pytorchjob"}), "does not serve a TrainJob + TrainingRuntime"),
                ("pytorchjob", "c10d", frozenset({"trainjob"}), "set cluster.eks.operator: trainjob or auto"),
                ("auto", "c10d", frozenset(), "serves neither"),
                ("auto", "etcd", frozenset({"trainjob"}), "rendezvous: etcd needs a PyTorchJob")]
    for operator, rendezvous, served, message in refusals:
        job = tiny_eks(cluster={"eks": {"operator": operator, "rendezvous": rendezvous}})
        assert message in (operator_choice.unserved(job, served) or ""), (operator, served)
    assert operator_choice.unserved(tiny_eks(cluster={"eks": {"operator": "auto"}}), frozenset({"pytorchjob"})) is None


def test_a_trainjob_with_the_etcd_rendezvous_is_refused_by_validate():
    spec = {"name": "t", "image": {"registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com", "name": "mtk",
                                   "tag": "t1"},
            "cluster": {"nodes": 2, "procs_per_node": 1, "device": "cpu", "runs_dir": "/fsx/runs",
                        "eks": {"operator": "trainjob", "rendezvous": "etcd"}},
            "data": {"dir": "/fsx/data"}, "model": {"preset": "tiny"}}
    with pytest.raises(SpecError, match=r"cluster\.eks\.rendezvous.*static.*operator: pytorchjob"):
        validate(spec, backend="eks")
    spec["cluster"]["eks"]["operator"] = "auto"
    assert validate(spec, backend="eks").cluster.eks.rendezvous == "etcd", "auto + etcd: a PyTorchJob, allowed"
