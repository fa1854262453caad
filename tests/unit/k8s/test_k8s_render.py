"""EKS render: pure, deterministic, valid manifests that carry the run label and the right pod contract."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from mtk.k8s import manifests, names, yamlio
from mtk.k8s.backend import ALL_FILE, EksBackend
from support import k8s_schema, operator_env

from mtk.netenv import efa_count, network_env

RUN_DIR = "/fsx/runs/tiny-eks-20261122-010203"
BUILTIN = {"ConfigMap", "Service", "Deployment", "Job", "NetworkPolicy"}


def _render(job, run_dir=RUN_DIR):
    return EksBackend().render(job, run_dir)


def _objs(artifacts) -> list[dict]:
    return yamlio.load_all(artifacts.files[ALL_FILE])


def _by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def test_render_is_deterministic_and_pure(tiny_eks):
    job = tiny_eks()
    before = job.model_dump_json()
    a, b = _render(job), _render(job)
    assert a.files == b.files and a.commands == b.commands
    assert job.model_dump_json() == before, "render must not mutate the job"
    other = _render(job, "/fsx/runs/tiny-eks-20261122-999999")
    assert other.files[ALL_FILE] != a.files[ALL_FILE]


@pytest.mark.parametrize("rendezvous", ["c10d", "etcd"])
def test_files_objects_and_order(tiny_eks, rendezvous):
    job = tiny_eks(cluster={"eks": {"rendezvous": rendezvous}},
                   data={"fetch": [{"url": "https://example.com/c.jsonl", "path": "c.jsonl"},
                                   {"url": "https://example.com/v.json", "path": "v.json"},
                                   {"url": "https://example.com/m.txt", "path": "m.txt"}],
                         "corpus": {"input": "c.jsonl", "output_prefix": "gpt2/c"},
                         "tokenizer": {"type": "GPT2BPETokenizer", "vocab_file": "v.json", "merge_file": "m.txt"},
                         "blend": [{"prefix": "gpt2/c_text_document"}]})
    art = _render(job)
    objs = _objs(art)
    etcd = [("NetworkPolicy", "etcd"), ("Service", "etcd"), ("Deployment", "etcd")] if rendezvous == "etcd" else []
    rdzv = [("Service", "train")] if rendezvous == "c10d" else []  # worker 0's store, named before it exists
    assert [(o["kind"], o["metadata"]["labels"][names.LABEL_COMPONENT]) for o in objs] == [
        ("ConfigMap", "spec"), *etcd, ("Job", "getdata"), ("Job", "preprocess"), ("NetworkPolicy", "train"), *rdzv,
        ("PyTorchJob", "train")]  # the policy that keeps other pods off the stores, before any pod it guards
    # The per-step files hold exactly the same objects as all.yaml.
    steps = ("spec", "etcd", "getdata", "preprocess", "train") if etcd else ("spec", "getdata", "preprocess", "train")
    assert "steps/etcd.yaml" in art.files if etcd else "steps/etcd.yaml" not in art.files
    per_step = [o for s in steps for o in yamlio.load_all(art.files[f"steps/{s}.yaml"])]
    assert per_step == objs
    assert art.files["job.json"] == job.to_json()
    assert json.loads(objs[0]["data"][names.SPEC_KEY]) == json.loads(job.to_json())
    # The kubectl plan waits where submit waits.
    flat = [" ".join(c) for c in art.commands]
    assert any("rollout status deployment/" in c for c in flat) == bool(etcd)
    assert sum("wait --for=condition=complete job/" in c for c in flat) == 2
    assert flat[-1].endswith("steps/train.yaml")


def test_every_object_and_pod_carries_the_run_label(tiny_eks):
    objs = _objs(_render(tiny_eks(cluster={"eks": {"rendezvous": "etcd"}})))
    run = names.run_id(RUN_DIR)
    for o in objs:
        assert o["metadata"]["labels"][names.LABEL_RUN] == run
        assert o["metadata"]["namespace"] == "default"
    templates = [_by_kind(objs, "Deployment")[0]["spec"]["template"],
                 _by_kind(objs, "PyTorchJob")[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]]
    for t in templates:
        assert t["metadata"]["labels"][names.LABEL_RUN] == run
    # The etcd Service selects the etcd pods of this run only.
    svc, dep = _by_kind(objs, "Service")[0], _by_kind(objs, "Deployment")[0]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    # c10d: the rendezvous Service selects worker 0's pod of this run's PyTorchJob (the operator's labels).
    objs = _objs(_render(tiny_eks(cluster={"eks": {"rendezvous": "c10d"}})))
    for o in objs:
        assert o["metadata"]["labels"][names.LABEL_RUN] == run
    (svc,) = _by_kind(objs, "Service")
    ptj = _by_kind(objs, "PyTorchJob")[0]
    assert svc["spec"]["selector"] == {names.LABEL_RUN: run, "training.kubeflow.org/job-name": ptj["metadata"]["name"],
                                       "training.kubeflow.org/replica-type": "worker",
                                       "training.kubeflow.org/replica-index": "0"}
    pod_labels = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert pod_labels[names.LABEL_RUN] == run  # the operator adds its own three to every worker pod


@pytest.mark.parametrize("nodes", [2, 512, 513, 1024])
def test_c10d_workers_learn_their_join_stagger_from_their_own_pod(example_7b, nodes):
    """A c10d PyTorchJob's every worker (and its preflight init container) reads its replica index from the label the
    operator sets on its pod, and the rendezvous conf asks for joins 25 ms per index apart; above 512 nodes also
    a 15 s keep-alive (docs/scale.md: what the one-key state can carry at 1,024)."""
    example_7b.cluster.nodes = nodes  # the render reads the node count; the parallel layout is not its subject
    objs = _objs(_render(example_7b))
    ptj = _by_kind(objs, "PyTorchJob")[0]
    keep_alive = [{"key": "keep_alive_interval", "value": "15"}] if nodes > 512 else []
    assert ptj["spec"]["elasticPolicy"]["rdzvConf"] == [*keep_alive, {"key": "mtk_join_stagger", "value": "0.025"}]
    pod = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    index_ref = {"name": "MTK_REPLICA_INDEX",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}}}
    preflight = next(c for c in pod["initContainers"] if c["name"] == "preflight")
    assert index_ref in pod["containers"][0]["env"] and index_ref in preflight["env"]
    conf = {e["name"]: e.get("value") for e in preflight["env"]}["MTK_PREFLIGHT_RDZV_CONF"]
    assert conf == ",".join(f"{c['key']}={c['value']}" for c in ptj["spec"]["elasticPolicy"]["rdzvConf"])
    # What each pod then runs: its own index (the label), the last one's wait 25 ms x (nodes - 1).
    last = operator_env.worker_pod_env(ptj, nodes - 1)
    assert last["MTK_REPLICA_INDEX"] == str(nodes - 1) and last["PET_RDZV_CONF"] == conf
    k8s_schema.pytorchjob_validator().validate(ptj)


def test_no_join_stagger_for_etcd_or_a_trainjob(example_7b):
    """etcd-v2 (AWS's reference layout) and a TrainJob's static rendezvous are left as they were."""
    example_7b.cluster.eks.rendezvous = "etcd"
    for operator in (manifests.PYTORCHJOB, manifests.TRAINJOB):
        text = yamlio.dump_all([o.body for o in manifests.build(example_7b, RUN_DIR, operator)])
        assert "MTK_REPLICA_INDEX" not in text and "mtk_join_stagger" not in text and "rdzvConf" not in text
    example_7b.cluster.eks.rendezvous = "c10d"
    text = yamlio.dump_all([o.body for o in manifests.build(example_7b, RUN_DIR, manifests.TRAINJOB)])
    assert "MTK_REPLICA_INDEX" not in text and "mtk_join_stagger" not in text


@pytest.mark.parametrize("rendezvous", ["c10d", "etcd"])
def test_builtin_kinds_pass_kubernetes_validate_strict(example_7b, tmp_path, rendezvous):
    example_7b.cluster.eks.rendezvous = rendezvous
    art = _render(example_7b)
    objs = _objs(art)
    assert {o["kind"] for o in objs} >= (BUILTIN if rendezvous == "etcd" else BUILTIN - {"Deployment", "NetworkPolicy"})
    for o in objs:
        if o["kind"] in BUILTIN:
            kubernetes_validate.validate(o, "1.32", strict=True)
    # The PyTorchJob's pod template is a core PodTemplateSpec: validate it as one.
    ptj = _by_kind(objs, "PyTorchJob")[0]
    template = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate",
                                  "metadata": {"name": "worker"}, "template": template}, "1.32", strict=True)
    # And the CLI the issue names, on the file kubectl takes.
    for step in ("spec", "etcd", "getdata", "preprocess"):
        if f"steps/{step}.yaml" in art.files:
            (tmp_path / f"{step}.yaml").write_text(art.files[f"steps/{step}.yaml"])
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "kubernetes-validate"), "--strict", "--quiet",
                          *[str(p) for p in sorted(tmp_path.glob("*.yaml"))]], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_validator_is_not_vacuous(example_7b):
    example_7b.cluster.eks.rendezvous = "etcd"
    objs = _objs(_render(example_7b))
    dep = copy.deepcopy(_by_kind(objs, "Deployment")[0])
    dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, "1.32", strict=True)
    ptj = copy.deepcopy(_by_kind(objs, "PyTorchJob")[0])
    ptj["spec"]["elasticPolicy"]["rdzvHosts"] = "typo"
    with pytest.raises(jsonschema.ValidationError):
        k8s_schema.pytorchjob_validator().validate(ptj)


@pytest.mark.parametrize("rendezvous", ["c10d", "etcd"])
@pytest.mark.parametrize("which", ["tiny", "7b"])
def test_pytorchjob_validates_against_operator_crd(which, rendezvous, tiny_eks, example_7b):
    job = tiny_eks() if which == "tiny" else example_7b
    job.cluster.eks.rendezvous = rendezvous
    ptj = _by_kind(_objs(_render(job)), "PyTorchJob")[0]
    k8s_schema.pytorchjob_validator().validate(ptj)
    # What the v1.9.0 webhook also checks: DNS-1035 name, a Worker spec, no nProcPerNode clash.
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", ptj["metadata"]["name"])
    assert len(operator_env.worker_pod(ptj["metadata"]["name"], 99)) <= 63
    assert "nProcPerNode" not in ptj["spec"]["elasticPolicy"]


def test_worker_pod_contract_7b(example_7b):
    job = example_7b
    run_dir = "/fsx/runs/gpt-7-5b-p5-20261122-000000"
    objs = _objs(_render(job, run_dir))
    ptj = _by_kind(objs, "PyTorchJob")[0]
    spec = ptj["spec"]
    run = names.run_id(run_dir)
    policy = spec["elasticPolicy"]
    # Two nodes: joins staggered 25 ms per replica index (the last of 2 waits 25 ms), torch's own keep-alive.
    assert policy == {"rdzvBackend": "c10d", "rdzvHost": f"{run}-rdzv", "rdzvPort": 29400, "rdzvId": run,
                      "rdzvConf": [{"key": "mtk_join_stagger", "value": "0.025"}],
                      "minReplicas": 2, "maxReplicas": 2, "maxRestarts": job.cluster.eks.max_restarts}
    assert policy["rdzvHost"] == _by_kind(objs, "Service")[0]["metadata"]["name"]
    assert _by_kind(objs, "Service")[0]["spec"]["ports"][0]["port"] == policy["rdzvPort"]
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == job.cluster.nodes
    pod = worker["template"]["spec"]
    (c,) = pod["containers"]
    assert c["name"] == "pytorch"
    assert c["image"] == "123456789012.dkr.ecr.us-west-2.amazonaws.com/mtk-megatron:latest"
    assert c["command"] == ["mtk-entrypoint", "train", "--job", "/etc/mtk/job.json", "--run-dir", run_dir]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert env["FI_PROVIDER"] == "efa" and env["PET_NPROC_PER_NODE"] == "8"
    assert network_env(job, run_dir).items() <= env.items()
    want = {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": efa_count(job)}
    assert efa_count(job) == 32
    want["hugepages-2Mi"] = "5120Mi"  # EFA buffers; memory is then requested too (a request only, no limit)
    assert c["resources"] == {"requests": {**want, "memory": "32000Mi"}, "limits": want}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/etc/mtk": "mtk-spec", "/fsx": "fsx", "/dev/shm": "dshm"}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert vols["fsx"]["persistentVolumeClaim"] == {"claimName": "fsx-claim"}
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    # Training waits for this run's data-ready marker: preprocess writes it once the dataset is merged and its
    # index cache built (the .bin/.idx appear before the cache; an earlier run's would count too).
    init = pod["initContainers"][0]
    assert init["command"][4:] == [f"{run_dir}/state/data-ready.json"]
    # Data Jobs: FSx, no in-place restarts, bounded retries, same spec file.
    for dj in _by_kind(objs, "Job"):
        t = dj["spec"]["template"]["spec"]
        assert t["restartPolicy"] == "Never"
        assert dj["spec"]["backoffLimit"] == job.cluster.eks.backoff_limit
        step = dj["metadata"]["labels"][names.LABEL_COMPONENT]
        assert t["containers"][0]["command"] == ["mtk-entrypoint", step, "--job", "/etc/mtk/job.json",
                                                 "--run-dir", run_dir]
        assert {"name": "fsx", "mountPath": "/fsx"} in t["containers"][0]["volumeMounts"]


def test_optional_placement_and_no_secret_values(tiny_eks):
    job = tiny_eks(cluster={"instance_type": "p4d.24xlarge", "device": "cpu",
                            "env": {"WANDB_MODE": "offline"},
                            "eks": {"node_selector": {"pool": "train"}, "service_account": "trainer",
                                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                     "effect": "NoSchedule"}],
                                    "image_pull_secrets": ["ecr-pull"], "cpu": "4", "memory": "8Gi"}})
    art = _render(job)
    objs = _objs(art)
    pod = _by_kind(objs, "PyTorchJob")[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p4d.24xlarge", "pool": "train"}
    assert pod["serviceAccountName"] == "trainer"
    assert pod["imagePullSecrets"] == [{"name": "ecr-pull"}]
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    res = pod["containers"][0]["resources"]
    assert res["limits"] == {"cpu": "4", "memory": "8Gi"}, "cpu device: no GPU or EFA requests"
    assert {"name": "WANDB_MODE", "value": "offline"} in pod["containers"][0]["env"]
    # Secrets are referenced by name only: no Secret object, no token-looking values anywhere.
    assert "Secret" not in {o["kind"] for o in objs}
    text = "".join(art.files.values())
    text = text.replace("imagePullSecrets", "").replace("automountServiceAccountToken: false", "")
    assert not re.search(r"(?i)(password|token|secret)\s*[:=]\s*\S", text)


def test_no_fsx_claim_and_run_dir_outside_mount_are_explained(tiny_eks):
    job = tiny_eks(cluster={"eks": {"fsx_claim": None}})
    art = _render(job, "/tmp/elsewhere/run-1")
    ptj = _by_kind(_objs(art), "PyTorchJob")[0]
    mounts = [m["mountPath"] for m in ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
              ["containers"][0]["volumeMounts"]]
    assert "/fsx" not in mounts
    assert any("fsx_claim is empty" in n for n in art.notes)
    art2 = _render(tiny_eks(), "/tmp/elsewhere/run-1")
    assert any("not under the FSx mount" in n for n in art2.notes)


def test_wait_for_data_takes_paths_as_argv_never_as_script(tiny_eks, tmp_path):
    """Run the init container's exact command through sh with hostile file names: it waits for them
    verbatim and executes nothing from them."""
    hostile = str(tmp_path / "d $(touch PWNED) `touch PWNED2`; x")
    job = tiny_eks(data={"dir": "/fsx/data",
                         "fetch": [{"url": "https://e.com/c.jsonl", "path": "c.jsonl"},
                                   {"url": "https://e.com/t.json", "path": "t.json"}],
                         "corpus": {"input": "c.jsonl", "output_prefix": "c"},
                         "tokenizer": {"type": "HuggingFaceTokenizer", "model": "t.json"}})
    pod = _by_kind(_objs(_render(job, hostile)), "PyTorchJob")[0]["spec"]["pytorchReplicaSpecs"]["Worker"][
        "template"]["spec"]
    cmd = pod["initContainers"][0]["command"]
    files = cmd[4:]
    assert files == [f"{hostile}/state/data-ready.json"]
    Path(hostile, "state").mkdir(parents=True)
    for f in files:
        Path(f).write_text("x")
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()


def test_a_run_dir_off_the_shared_volume_is_refused_before_anything_is_written(tiny_eks):
    """Training pods wait on the shared volume for the preprocess step's marker in the run dir: a run dir the
    pods would each keep on their own disk would make them wait forever."""
    job = tiny_eks(data={"dir": "/fsx/data", "corpus": {"input": "c.jsonl", "output_prefix": "c"},
                         "tokenizer": {"type": "HuggingFaceTokenizer", "model": "t.json"}})
    [problem] = EksBackend().launch_problems(job, "/home/me/runs/r1")
    assert problem.path == "cluster.runs_dir" and "fsx_mount (/fsx)" in problem.message
    assert problem.value == "/home/me/runs/r1"


@pytest.mark.parametrize("rendezvous", ["c10d", "etcd"])
def test_operator_env_drives_the_train_step_to_its_rendezvous(tiny_eks, rendezvous):
    """The lead's train step, given what operator v1.9.0 injects into a rendered pod, runs torchrun against the
    run's rendezvous (worker 0's c10d store behind the rdzv Service, joins staggered by replica index; or the run's
    etcd Service) with elastic restarts — the same argv for a replacement pod (resume path)."""
    from mtk.launcher.train_step import torchrun_argv

    job = tiny_eks(cluster={"eks": {"rendezvous": rendezvous}})
    ptj = _by_kind(_objs(_render(job)), "PyTorchJob")[0]
    run = names.run_id(RUN_DIR)
    injected = operator_env.injected_env(ptj)
    endpoint, backend = (f"{run}-etcd:2379", "etcd-v2") if rendezvous == "etcd" else (f"{run}-rdzv:29400", "c10d")
    conf = {} if rendezvous == "etcd" else {"PET_RDZV_CONF": "mtk_join_stagger=0.025"}
    assert injected == {"PYTHONUNBUFFERED": "0", "PET_RDZV_ENDPOINT": endpoint,
                        "PET_RDZV_BACKEND": backend, "PET_NNODES": "2:2", "PET_MAX_RESTARTS": "3",
                        "PET_RDZV_ID": run, **conf}
    cmd = operator_env.worker_command(ptj)
    assert cmd[:2] == ["mtk-entrypoint", "train"]
    argvs = [torchrun_argv(job, RUN_DIR, names.SPEC_PATH, env=operator_env.worker_pod_env(ptj, i),
                           program=["torchrun"]) for i in (0, 1)]
    joined = " ".join(argvs[0][0])
    torchrun_backend = "etcd-v2" if rendezvous == "etcd" else "mtk-c10d"  # torch's c10d, joins staggered
    for part in ("--nnodes 2:2", "--nproc-per-node 1", f"--rdzv-backend {torchrun_backend}",
                 f"--rdzv-endpoint {endpoint}", f"--rdzv-id {run}", "--max-restarts 3"):
        assert part in joined
    assert argvs[0][1] == f"{run}-worker-0"
    if rendezvous == "etcd":
        assert "--rdzv-conf" not in joined and argvs[1][0] == argvs[0][0], "every worker runs the same command"
    else:  # each worker's own index (the pod's replica-index label), nothing else differs
        confs = [argv[argv.index("--rdzv-conf") + 1] for argv, _ in argvs]
        assert confs == ["mtk_join_stagger=0.025,mtk_join_index=0", "mtk_join_stagger=0.025,mtk_join_index=1"]
        assert [a for a in argvs[1][0] if a != confs[1]] == [a for a in argvs[0][0] if a != confs[0]]
    again, _ = torchrun_argv(job, RUN_DIR, names.SPEC_PATH, env=operator_env.worker_pod_env(ptj, 1),
                             program=["torchrun"])
    assert again == argvs[1][0], "a replacement pod (same replica index) runs its predecessor's command"


def test_resume_path_is_wired(tiny_eks):
    """Issue 8 item 6 at unit level: a failed worker restarts in place (OnFailure) or is re-created by the
    operator, rejoins the same etcd rendezvous, and finds the checkpoint on shared storage."""
    job = tiny_eks(cluster={"eks": {"rendezvous": "etcd"}})
    objs = _objs(_render(job))
    ptj = _by_kind(objs, "PyTorchJob")[0]
    worker = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "OnFailure"
    assert ptj["spec"]["elasticPolicy"]["maxRestarts"] == job.cluster.eks.max_restarts
    assert ptj["spec"]["runPolicy"]["backoffLimit"] == job.cluster.eks.max_restarts
    env = {e["name"]: e["value"] for e in worker["template"]["spec"]["containers"][0]["env"] if "value" in e}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # SIGTERM (eviction, cancel) gives the engine time to save before the kubelet kills the pod.
    assert worker["template"]["spec"]["terminationGracePeriodSeconds"] >= 120
    spec = json.loads(objs[0]["data"][names.SPEC_KEY])
    ckpt = spec["train"]["checkpoint"]
    assert ckpt["load"] is True
    # The etcd Deployment survives worker restarts (its own object) and keeps one member.
    dep = _by_kind(objs, "Deployment")[0]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    assert "--enable-v2=true" in dep["spec"]["template"]["spec"]["containers"][0]["args"]


def test_checkpoints_on_shared_storage_for_the_example(example_7b):
    ckpt = example_7b.train.checkpoint.dir
    assert manifests.under_mount(ckpt, example_7b.cluster.eks.fsx_mount), ckpt


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=120))
def test_run_id_is_always_a_short_dns_label(base):
    run = names.run_id(f"/fsx/runs/{base}")
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", run), run
    assert len(run) <= names.MAX_RUN_ID
    assert len(operator_env.worker_pod(run, 999)) <= 63
    assert names.run_id(f"/fsx/runs/{base}") == run


def test_run_ids_keep_mtks_own_run_dir_names_and_tell_apart_names_made_into_labels():
    """mtk's own ``<job>-<UTC time>`` (and ``-2`` of a second launch in that second) is the id as it is; a name that
    had to be made a DNS label carries a hash of the name as written, so names that differ never share an id."""
    for base in ("tiny-eks-20261122-010203", "tiny-eks-20261122-010203-2", "exp1"):
        assert names.run_id(f"/fsx/runs/{base}") == base
        assert names.run_id(f"/fsx/other/{base}/") == base  # the folder is not part of it: ownership tells those apart
    assert names.run_id("/fsx/runs/7b-20261122-010203") == "r-7b-20261122-010203"
    made = [names.run_id(f"/fsx/runs/{base}") for base in ("Exp_1", "exp_1", "EXP-1", "exp.1", "exp--1", "-exp-1")]
    assert len(set(made)) == len(made) and "exp-1" not in made, made
    assert all(re.fullmatch(r"exp-1-[0-9a-f]{8}", run) for run in made), made


def test_long_run_names_stay_distinct():
    a = names.run_id("/fsx/runs/" + "a" * 40 + "-20261122-000001")
    b = names.run_id("/fsx/runs/" + "a" * 40 + "-20261122-000002")
    assert a != b and len(a) == len(b) == names.MAX_RUN_ID


def test_job_json_is_a_readable_literal_block(tiny_eks):
    text = _render(tiny_eks()).files["steps/spec.yaml"]
    assert "job.json: |" in text
    assert yaml.safe_load(text.split("---\n", 1)[1])["data"]["job.json"] == tiny_eks().to_json()


_env_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(env=st.dictionaries(_env_names, st.text(max_size=40), max_size=4),
       leaf=st.text(alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
                    min_size=1, max_size=30))
def test_hostile_values_reach_the_pod_verbatim(tiny_eks, env, leaf):
    """Quotes, newlines, `$()`, backticks, `: ` and `#` in env values and the run dir survive YAML exactly:
    the manifests are serialised by a library, never pasted."""
    job = tiny_eks(cluster={"env": env})
    run_dir = f"/fsx/runs/{leaf}"
    art = _render(job, run_dir)
    ptj = _by_kind(_objs(art), "PyTorchJob")[0]
    container = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    got = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env.items() <= got.items()
    assert container["command"][-1] == run_dir
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", ptj["metadata"]["name"])


def test_excluded_nodes_and_preflight_init_step_validate(example_7b, tmp_path):
    """A restart that avoids blamed nodes (cluster.exclude_nodes → required node anti-affinity) and the
    preflight init container: against the operator's CRD and `kubernetes-validate --strict`."""
    job = example_7b.model_copy(deep=True)
    job.cluster.exclude_nodes = ["ip-10-1-2-3.us-west-2.compute.internal", "ip-10-1-2-4.us-west-2.compute.internal"]
    ptj = _by_kind(_objs(_render(job)), "PyTorchJob")[0]
    k8s_schema.pytorchjob_validator().validate(ptj)
    pod = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                         "values": job.cluster.exclude_nodes}]
    preflight = next(c for c in pod["initContainers"] if c["name"] == "preflight")
    assert preflight["command"][:2] == ["mtk-entrypoint", "preflight"]
    assert preflight["resources"] == pod["containers"][0]["resources"]  # sees the GPUs/EFA it must count
    node_env = {"name": "MTK_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert node_env in pod["containers"][0]["env"]
    template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker"},
                "template": ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]}
    kubernetes_validate.validate(template, "1.32", strict=True)
    (tmp_path / "worker.yaml").write_text(yaml.safe_dump(template))
    out = subprocess.run(["kubernetes-validate", "--strict", "--quiet", str(tmp_path / "worker.yaml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # Without exclusions there is no affinity; without the gate no preflight init container.
    job.cluster.exclude_nodes = []
    job.resilience.preflight.enabled = False
    pod = _by_kind(_objs(_render(job)), "PyTorchJob")[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "affinity" not in pod and all(c["name"] != "preflight" for c in pod.get("initContainers", []))
