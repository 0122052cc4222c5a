"""What the rendered objects mean to the scheduler, to a NetworkPolicy CNI and to Istio's
authorization filter, for the few fields this stack uses: enough to ask "may pod A reach port P
of pod B" and "may this pod run on that node" of the dicts, without a cluster.

Each function refuses (KeyError/ValueError) a field or operator it does not model, so a new
field in the manifests cannot be silently ignored by the tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = Mapping[str, Any]
Labels = Mapping[str, str]


def _expression(expr: Obj, labels: Labels) -> bool:
    key, operator, values = expr["key"], expr["operator"], expr.get("values", [])
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise ValueError(f"operator {operator!r} is not modelled")


def selects(selector: Obj, labels: Labels) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against labels; {} selects everything."""
    unknown = set(selector) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise KeyError(f"selector fields not modelled: {unknown}")
    match = selector.get("matchLabels", {})
    return all(labels.get(k) == v for k, v in match.items()) and all(
        _expression(e, labels) for e in selector.get("matchExpressions", [])
    )


@dataclass(frozen=True)
class Node:
    labels: Labels
    taints: tuple[Obj, ...] = ()


def schedulable(pod: Obj, node: Node) -> bool:
    """nodeSelector, required node affinity and NoSchedule/NoExecute taints versus tolerations."""
    if not all(node.labels.get(k) == v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not any(
        all(_expression(e, node.labels) for e in term["matchExpressions"]) for term in required["nodeSelectorTerms"]
    ):
        return False

    def tolerated(taint: Obj) -> bool:
        for toleration in pod.get("tolerations") or []:
            key_ok = toleration.get("key") in (None, taint["key"])
            if toleration.get("operator", "Equal") == "Exists":
                value_ok = True
            else:
                value_ok = toleration.get("value") == taint.get("value")
            effect_ok = toleration.get("effect") in (None, taint["effect"])
            if key_ok and value_ok and effect_ok:
                return True
        return False

    return all(tolerated(t) for t in node.taints if t["effect"] in ("NoSchedule", "NoExecute"))


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: Labels
    namespace_labels: Labels = field(default_factory=dict)

    def ns_labels(self) -> Labels:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


def network_allows(policies: Iterable[Obj], source: Pod, target: Pod, port: int) -> bool:
    """Ingress NetworkPolicies: a pod no policy selects takes anything; a selected pod takes
    what any rule of any selecting policy lets in."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target.namespace and selects(p["spec"]["podSelector"], target.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        if policy["spec"]["policyTypes"] != ["Ingress"]:
            raise ValueError(f"policyTypes {policy['spec']['policyTypes']} not modelled")
        for rule in policy["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports is not None and not any(p["port"] == port and p["protocol"] == "TCP" for p in ports):
                continue
            for peer in rule["from"]:
                if set(peer) - {"podSelector", "namespaceSelector"}:
                    raise KeyError(f"peer fields not modelled: {set(peer)}")
                if "namespaceSelector" in peer:
                    ns_ok = selects(peer["namespaceSelector"], source.ns_labels())
                else:
                    ns_ok = source.namespace == target.namespace
                pod_ok = selects(peer.get("podSelector", {}), source.labels)
                if ns_ok and pod_ok:
                    return True
    return False


@dataclass(frozen=True)
class Request:
    """One request as Istio's authorization filter sees it: no principal means plaintext."""

    port: int
    method: str = "GET"
    path: str = "/"
    principal: str | None = None


def _value_matches(pattern: str, value: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    if pattern.startswith("*"):
        return value.endswith(pattern[1:])
    return pattern == value


def _source(source: Obj, request: Request) -> bool:
    if set(source) - {"principals"}:
        raise KeyError(f"source fields not modelled: {set(source)}")
    return request.principal is not None and any(_value_matches(p, request.principal) for p in source["principals"])


def _operation(operation: Obj, request: Request) -> bool:
    if set(operation) - {"ports", "methods", "paths"}:
        raise KeyError(f"operation fields not modelled: {set(operation)}")
    return (
        ("ports" not in operation or str(request.port) in operation["ports"])
        and ("methods" not in operation or request.method in operation["methods"])
        and ("paths" not in operation or any(_value_matches(p, request.path) for p in operation["paths"]))
    )


def istio_allows(policies: Iterable[Obj], target: Pod, request: Request) -> bool:
    """ALLOW AuthorizationPolicies: without one selecting the workload everything passes; with
    some, a request passes when a rule matches: one of its `from` entries (if any) and one of its
    `to` entries (if any)."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target.namespace and selects(p["spec"]["selector"], target.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        if policy["spec"]["action"] != "ALLOW":
            raise ValueError(f"action {policy['spec']['action']} not modelled")
        for rule in policy["spec"]["rules"]:
            if set(rule) - {"from", "to"}:
                raise KeyError(f"rule fields not modelled: {set(rule)}")
            sources, operations = rule.get("from"), rule.get("to")
            from_ok = not sources or any(_source(clause["source"], request) for clause in sources)
            to_ok = not operations or any(_operation(clause["operation"], request) for clause in operations)
            if from_ok and to_ok:
                return True
    return False
