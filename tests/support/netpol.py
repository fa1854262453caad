"""Kubernetes NetworkPolicy ingress semantics, evaluated from selectors and labels (no CNI runs here).

The rules of networking.k8s.io/v1 (Kubernetes' NetworkPolicy documentation and API reference): a pod is isolated
for ingress when a policy of its namespace selects it (``spec.podSelector``) and lists ``Ingress`` in its
``policyTypes``; an isolated pod admits a connection only when some such policy has an ingress rule whose ``from``
matches the source (no ``from``: every source; a ``podSelector`` peer: pods of the policy's namespace, or of the
namespaces a ``namespaceSelector`` beside it selects) and whose ``ports`` match (none: every port; a port without
a number: every port of its protocol, TCP by default; ``endPort``: a range). A pod no policy selects admits
everything. ipBlock peers and named ports are not modelled: they raise, so a policy using them cannot pass a test
by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pod:
    name: str
    labels: dict[str, str]
    namespace: str = "default"
    namespace_labels: dict[str, str] = field(default_factory=dict)


def selects(selector: dict | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against a label set; an empty selector selects all."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _ingress_policies(policies: list[dict], pod: Pod) -> list[dict]:
    return [p for p in policies
            if p["metadata"].get("namespace", "default") == pod.namespace
            and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
            and selects(p["spec"].get("podSelector"), pod.labels)]


def isolated(policies: list[dict], pod: Pod) -> bool:
    return bool(_ingress_policies(policies, pod))


def _peer_matches(peer: dict, policy_ns: str, src: Pod) -> bool:
    if "ipBlock" in peer:
        raise NotImplementedError("ipBlock peers are not modelled")
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], src.namespace_labels):
            return False
    elif src.namespace != policy_ns:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], src.labels)


def _port_matches(entry: dict, port: int, protocol: str) -> bool:
    if entry.get("protocol", "TCP") != protocol:
        return False
    if "port" not in entry:
        return True
    if not isinstance(entry["port"], int):
        raise NotImplementedError("named ports are not modelled")
    return entry["port"] <= port <= entry.get("endPort", entry["port"])


def admits(policies: list[dict], src: Pod, dst: Pod, port: int, protocol: str = "TCP") -> bool:
    """Whether ``dst`` accepts a connection from ``src`` on ``port`` under ``policies`` (every policy of the
    cluster: the ones of other namespaces do not apply)."""
    selecting = _ingress_policies(policies, dst)
    if not selecting:
        return True
    for policy in selecting:
        ns = policy["metadata"].get("namespace", "default")
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            if peers and not any(_peer_matches(peer, ns, src) for peer in peers):
                continue
            ports = rule.get("ports")
            if not ports or any(_port_matches(entry, port, protocol) for entry in ports):
                return True
    return False
