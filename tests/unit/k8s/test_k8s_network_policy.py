"""The rendezvous stores are the run's own (issue 51 item 6): worker 0's c10d store (29400), the preflight's
(29401), a TrainJob's master port (29500) and the stores and bootstrap sockets torch opens on free ports have no
authentication, so the run's NetworkPolicy admits only the run's own training pods to its training pods. Two runs
are rendered in one namespace and the policies are evaluated from their selectors against the labels of every pod
the operators would create (tests/support/netpol.py: Kubernetes' NetworkPolicy rules): each run's training pods
reach their own stores, never the other run's; the run's own data pods (which handle downloaded data), its etcd,
a pod that carries only its ``mtk/run`` label and a pod of no run reach neither; nothing else is isolated by
them. A pod that forges every label of a training pod is admitted: labels are no identity within a namespace
(docs/security.md), which the last assertion states rather than hides."""

from __future__ import annotations

import kubernetes_validate
import pytest
from mtk.k8s import manifests, names
from support import netpol, operator_env, trainer_env
from support.netpol import Pod

RUNS = ("/fsx/runs/tiny-eks-20261201-000001", "/fsx/runs/tiny-eks-20261201-000002")
STORE_PORTS = (manifests.C10D_PORT, manifests.PREFLIGHT_C10D_PORT, manifests.TRAINER_MASTER_PORT)
FREE_PORT = 41234  # e.g. the store torchrun's agent opens for its workers, NCCL/gloo's bootstrap


def _job(tiny_eks, operator: str, rendezvous: str):
    return tiny_eks(cluster={"eks": {"operator": operator, "rendezvous": rendezvous}},
                    data={"fetch": [{"url": "https://example.com/c.jsonl", "path": "c.jsonl"},
                                    {"url": "https://example.com/t.json", "path": "t.json"}],
                          "corpus": {"input": "c.jsonl", "output_prefix": "tok/c", "shards": 2, "workers": 1},
                          "tokenizer": {"type": "HuggingFaceTokenizer", "model": "t.json"},
                          "blend": [{"prefix": "tok/c_text_document"}]})


def _pods(bodies: list[dict]) -> dict[str, list[Pod]]:
    """Every pod the cluster would run for these objects, by role, with the labels it would carry."""
    out: dict[str, list[Pod]] = {"train": [], "data": [], "etcd": []}
    by_kind = {b["kind"]: b for b in bodies}
    for b in bodies:
        if b["kind"] == "Job":
            labels = {**b["spec"]["template"]["metadata"]["labels"], "job-name": b["metadata"]["name"]}
            out["data"] += [Pod(f"{b['metadata']['name']}-{i}", labels) for i in range(b["spec"].get("completions", 1))]
        elif b["kind"] == "Deployment":
            out["etcd"].append(Pod(b["metadata"]["name"], dict(b["spec"]["template"]["metadata"]["labels"])))
    if "PyTorchJob" in by_kind:
        ptj = by_kind["PyTorchJob"]
        worker = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]
        for i in range(worker["replicas"]):  # the operator adds its own labels to the template's
            labels = {**worker["template"]["metadata"]["labels"], manifests.OPERATOR_JOB_LABEL: ptj["metadata"]["name"],
                      manifests.OPERATOR_TYPE_LABEL: "worker", manifests.OPERATOR_INDEX_LABEL: str(i)}
            out["train"].append(Pod(operator_env.worker_pod(ptj["metadata"]["name"], i), labels))
    if "TrainJob" in by_kind:
        js = trainer_env.jobset(by_kind["TrainJob"], by_kind["TrainingRuntime"])
        out["train"] += [Pod(p["metadata"]["name"], p["metadata"]["labels"]) for p in trainer_env.pods(js)]
    return out


@pytest.mark.parametrize(("operator", "rendezvous"), [("pytorchjob", "c10d"), ("pytorchjob", "etcd"),
                                                      ("trainjob", "c10d")])
def test_only_the_runs_own_pods_reach_its_stores(tiny_eks, operator, rendezvous):
    job = _job(tiny_eks, operator, rendezvous)
    runs = [[o.body for o in manifests.build(job, run_dir, operator)] for run_dir in RUNS]
    policies = [b for bodies in runs for b in bodies if b["kind"] == "NetworkPolicy"]
    for policy in policies:
        kubernetes_validate.validate(policy, "1.32", strict=True)
    mine, theirs = _pods(runs[0]), _pods(runs[1])
    assert len(mine["train"]) == 2 and len(mine["data"]) == 3  # 2 training pods; getdata + 2 preprocess shards
    run = names.run_id(RUNS[0])
    stranger = Pod("notebook", {"app": "jupyter"})
    run_label_only = Pod("labelled-by-hand", {names.LABEL_RUN: run})  # what the policy admitted before
    intruders = [stranger, run_label_only, *mine["data"], *mine["etcd"], *theirs["train"], *theirs["data"],
                 *theirs["etcd"]]
    for dst in mine["train"]:
        assert netpol.isolated(policies, dst)
        for port in (*STORE_PORTS, FREE_PORT):
            assert all(netpol.admits(policies, src, dst, port) for src in mine["train"]), (dst, port)
            assert not [src.name for src in intruders if netpol.admits(policies, src, dst, port)], (dst, port)
    # Symmetric: the other run's stores are closed to this run's pods, training and data alike.
    for dst in theirs["train"]:
        assert all(netpol.admits(policies, src, dst, manifests.C10D_PORT) for src in theirs["train"])
        assert not [src.name for src in [*mine["train"], *mine["data"]]
                    if netpol.admits(policies, src, dst, manifests.C10D_PORT)]
    # The training policy selects the run's training pods and nothing else: the data pods stay as open as before.
    (train_policy,) = [p for p in policies if p["metadata"]["name"] == names.train_policy(run)]
    everyone = [*mine["train"], *intruders]
    assert [p.name for p in everyone if netpol.selects(train_policy["spec"]["podSelector"], p.labels)] == \
        [p.name for p in mine["train"]]
    assert not any(netpol.isolated(policies, p) for p in [*mine["data"], *theirs["data"], stranger])
    if rendezvous == "etcd":  # the run's etcd keeps its own policy: its client port, this run's training pods only
        (etcd,) = mine["etcd"]
        assert all(netpol.admits(policies, src, etcd, names.ETCD_PORT) for src in mine["train"])
        assert not [src.name for src in intruders if netpol.admits(policies, src, etcd, names.ETCD_PORT)]
    # The limit, stated: a pod given every label a training pod carries is let in. Only an admission policy that
    # keeps others from creating such pods in the namespace stops it (docs/security.md).
    forged = Pod("forged", dict(mine["train"][0].labels))
    assert netpol.admits(policies, forged, mine["train"][0], manifests.C10D_PORT)


def test_the_policy_is_applied_before_the_pods_it_guards(tiny_eks):
    for operator in ("pytorchjob", "trainjob"):
        kinds = [o.kind for o in manifests.build(tiny_eks(), RUNS[0], operator) if o.step == "train"]
        assert kinds[0] == "NetworkPolicy", kinds


# ---- the evaluator itself holds to Kubernetes' rules, so a passing test above means the policy does --------------
def test_the_evaluator_follows_kubernetes_rules():
    a, b = Pod("a", {"app": "a"}), Pod("b", {"app": "b"}, namespace="other", namespace_labels={"team": "x"})

    def policy(spec: dict, ns: str = "default") -> dict:
        return {"metadata": {"name": "p", "namespace": ns}, "spec": spec}

    assert netpol.admits([], b, a, 80), "no policy: everything is admitted"
    deny_all = policy({"podSelector": {}, "policyTypes": ["Ingress"]})
    assert not netpol.admits([deny_all], a, a, 80)
    assert netpol.admits([deny_all], a, b, 80), "a policy never isolates pods of another namespace"
    from_anyone = policy({"podSelector": {"matchLabels": {"app": "a"}}, "policyTypes": ["Ingress"],
                          "ingress": [{"ports": [{"port": 8000, "endPort": 8010}, {"protocol": "UDP"}]}]})
    assert netpol.admits([from_anyone], b, a, 8005) and not netpol.admits([from_anyone], b, a, 8011)
    assert netpol.admits([from_anyone], b, a, 53, "UDP") and not netpol.admits([from_anyone], b, a, 53)
    same_ns_only = policy({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})
    assert netpol.admits([same_ns_only], a, a, 1) and not netpol.admits([same_ns_only], b, a, 1)
    team = policy({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}},
                                                            "podSelector": {"matchExpressions": [
                                                                {"key": "app", "operator": "In",
                                                                 "values": ["b"]}]}}]}]})
    assert netpol.admits([team], b, a, 1) and not netpol.admits([team], a, a, 1)
    # Policies add up: a second one that admits b opens the pod to b as well.
    assert netpol.admits([deny_all, team], b, a, 1) and not netpol.admits([deny_all, team], a, a, 1)
    with pytest.raises(NotImplementedError):
        netpol.admits([policy({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]})],
                      b, a, 1)
