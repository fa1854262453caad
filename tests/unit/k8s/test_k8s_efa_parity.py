"""Issue #26 on EKS: huge pages and memory beside EFA, FI_EFA_USE_HUGE_PAGE=0 when DataLoader workers fork, no
API token in any pod, a NetworkPolicy that admits only the run's pods to its etcd, etcd pinned by digest (with
``cluster.eks.rendezvous: etcd``; c10d needs no etcd)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
from mtk.k8s import manifests, names
from mtk.launcher.paths import resolve_paths

from mtk.spec import load_job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RUN_DIR = "/fsx/runs/gpt-7-5b-p5-20261124-000000"


def p5(*sets: str):
    return resolve_paths(load_job(EXAMPLES / "gpt-7.5b-p5-eks.yaml", list(sets), backend="eks"), "eks", cwd="/fsx")


def objs(*sets: str) -> list[dict]:
    return [o.body for o in manifests.build(p5(*sets), RUN_DIR)]


def pod_specs(bodies: list[dict]) -> list[dict]:
    out = []
    for b in bodies:
        if b["kind"] in ("Deployment", "Job"):
            out.append(b["spec"]["template"]["spec"])
        elif b["kind"] == "PyTorchJob":
            out += [r["template"]["spec"] for r in b["spec"]["pytorchReplicaSpecs"].values()]
    return out


def worker(bodies: list[dict]) -> dict:
    return next(b for b in bodies if b["kind"] == "PyTorchJob")["spec"]["pytorchReplicaSpecs"]["Worker"]


def test_every_pod_runs_without_an_api_token():
    specs = pod_specs(objs("cluster.eks.rendezvous=etcd"))
    assert len(specs) == 4  # etcd, getdata, preprocess, workers
    assert all(s["automountServiceAccountToken"] is False for s in specs)
    specs = pod_specs(objs("cluster.eks.rendezvous=c10d"))
    assert len(specs) == 3  # getdata, preprocess, workers (worker 0's agent hosts the store)
    assert all(s["automountServiceAccountToken"] is False for s in specs)


def test_efa_workers_request_hugepages_and_memory_and_validate():
    bodies = objs()
    res = worker(bodies)["template"]["spec"]["containers"][0]["resources"]
    assert res["limits"]["hugepages-2Mi"] == res["requests"]["hugepages-2Mi"] == "5120Mi"
    assert res["requests"]["memory"] == "32000Mi" and "memory" not in res["limits"]
    for b in bodies:
        if b["kind"] != "PyTorchJob":
            kubernetes_validate.validate(b, "1.32", strict=True)
    explicit = worker(objs("cluster.eks.memory=1500Gi"))["template"]["spec"]["containers"][0]["resources"]
    assert explicit["requests"]["memory"] == explicit["limits"]["memory"] == "1500Gi"
    off = worker(objs("cluster.eks.hugepages=null"))["template"]["spec"]["containers"][0]["resources"]
    assert "hugepages-2Mi" not in off["limits"] and "memory" not in off["requests"]
    cpu = worker(objs("cluster.device=cpu"))["template"]["spec"]["containers"][0].get("resources", {})
    assert "hugepages-2Mi" not in cpu.get("limits", {})


def test_huge_page_buffers_off_only_when_dataloader_workers_fork():
    def env(*sets):
        return {e["name"]: e.get("value") for e in worker(objs(*sets))["template"]["spec"]["containers"][0]["env"]}

    assert env("data.num_workers=2")["FI_EFA_USE_HUGE_PAGE"] == "0"
    assert "FI_EFA_USE_HUGE_PAGE" not in env("data.num_workers=0")
    assert env("data.num_workers=2", "cluster.env={FI_EFA_USE_HUGE_PAGE: '1'}")["FI_EFA_USE_HUGE_PAGE"] == "1"


def test_only_the_runs_pods_reach_its_etcd():
    bodies = objs("cluster.eks.rendezvous=etcd")
    run = names.run_id(RUN_DIR)
    policy = next(b for b in bodies if b["kind"] == "NetworkPolicy")
    kubernetes_validate.validate(policy, "1.32", strict=True)
    etcd = next(b for b in bodies if b["kind"] == "Deployment")
    etcd_labels = etcd["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= etcd_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    # The training pods only (the agents and the preflight's init containers): not the run's data pods.
    assert rule["from"] == [{"podSelector": {"matchLabels": {names.LABEL_RUN: run, names.LABEL_COMPONENT: "train"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": names.ETCD_PORT}]
    assert rule["from"][0]["podSelector"]["matchLabels"].items() <= \
        worker(bodies)["template"]["metadata"]["labels"].items()  # workers are admitted
    assert [b["kind"] for b in bodies].index("NetworkPolicy") < [b["kind"] for b in bodies].index("Deployment")


def test_etcd_image_is_pinned_by_digest():
    etcd = next(b for b in objs("cluster.eks.rendezvous=etcd") if b["kind"] == "Deployment")
    image = etcd["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("quay.io/coreos/etcd:v3.5.17@sha256:") and len(image.split("@sha256:")[1]) == 64


def test_preflight_init_container_finds_its_peers_through_the_runs_etcd():
    bodies = objs("cluster.eks.rendezvous=etcd")
    run = names.run_id(RUN_DIR)
    init = {c["name"]: c for c in worker(bodies)["template"]["spec"]["initContainers"]}["preflight"]
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert env["MTK_PREFLIGHT_RDZV"] == f"{names.etcd(run)}:{names.ETCD_PORT}"
    assert env["MTK_PREFLIGHT_RDZV_BACKEND"] == "etcd-v2"
    assert env["MTK_PREFLIGHT_RDZV_ID"] == f"{run}-preflight" and env["MTK_PREFLIGHT_NODES"] == "2"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_preflight_init_containers_meet_at_worker_0_through_the_rdzv_service_with_c10d():
    """c10d: worker 0's init container hosts the preflight's store on its own port, behind the Service that
    resolves before the pod is ready (init containers run while it is not)."""
    bodies = objs("cluster.eks.rendezvous=c10d")
    run = names.run_id(RUN_DIR)
    init = {c["name"]: c for c in worker(bodies)["template"]["spec"]["initContainers"]}["preflight"]
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert env["MTK_PREFLIGHT_RDZV"] == f"{manifests.rdzv_service_name(run)}:{manifests.PREFLIGHT_C10D_PORT}"
    assert env["MTK_PREFLIGHT_RDZV_BACKEND"] == "c10d" and env["MTK_PREFLIGHT_NODES"] == "2"
    svc = next(b for b in bodies if b["kind"] == "Service")
    kubernetes_validate.validate(svc, "1.32", strict=True)
    assert svc["spec"]["publishNotReadyAddresses"] is True and svc["spec"]["clusterIP"] == "None"
    assert {p["port"] for p in svc["spec"]["ports"]} == {manifests.C10D_PORT, manifests.PREFLIGHT_C10D_PORT}
    assert not [b for b in bodies if b["kind"] == "Deployment"]  # no etcd: the run's own NetworkPolicy only
    (policy,) = [b for b in bodies if b["kind"] == "NetworkPolicy"]
    assert policy["metadata"]["name"] == names.train_policy(run)


def test_data_jobs_request_cpu_only_on_a_gpu_efa_job():
    """getdata and preprocess pods never ask for a GPU, EFA or huge pages (issue 46 item 3): a CPU request each
    (preprocess: its workers' CPUs, else manifests.DATA_CPUS; getdata: 1), so they never hold what training
    needs — while the p5 workers ask for all of it."""
    bodies = objs()
    jobs = {b["metadata"]["labels"][names.LABEL_COMPONENT]: b for b in bodies if b["kind"] == "Job"}
    assert set(jobs) == {"getdata", "preprocess"}
    workers = p5().data.corpus.workers
    want = {"getdata": "1", "preprocess": str(workers or manifests.DATA_CPUS)}
    for step, body in jobs.items():
        (container,) = body["spec"]["template"]["spec"]["containers"]
        assert container["resources"] == {"requests": {"cpu": want[step]}}, step
        kubernetes_validate.validate(body, "1.32", strict=True)
    no_workers = next(b for b in objs("data.corpus.workers=null") if b["kind"] == "Job"
                      and b["metadata"]["labels"][names.LABEL_COMPONENT] == "preprocess")
    assert no_workers["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": str(manifests.DATA_CPUS)}}
    assert {"nvidia.com/gpu", "vpc.amazonaws.com/efa"} <= set(worker(bodies)["template"]["spec"]["containers"][0]
                                                              ["resources"]["limits"])
