"""What a cluster has, asked of the server itself rather than assumed from the tests' own
control plane: a scheduler, a workload controller, a CSR signer, the Node authorizer.

Each probe makes an object that asks for the component's work without running anything (a pod
that fits no node, a workload that makes no pods, a CSR), waits up to `PROBE_DEADLINE` for the
component's answer and returns what the cluster lacks in one line, or None. The `Cluster`
methods (`tests/cluster.py`) ask each once per session and skip with that line.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from kubelet_sim.kube.rest import ApiError, request_json
from tests.node_certs import NoNodeCredentials, mint_node_kubeconfig
from tests.polling import poll

PROBE_DEADLINE = 15.0  # a running scheduler or controller answers within a second
# Never pulled (imagePullPolicy Never), never started: nothing is scheduled to run it.
_CONTAINER = {"name": "c", "image": "kubelet-sim.local/probe", "imagePullPolicy": "Never"}
_NOWHERE = {"kubelet-sim.io/probe": "nowhere"}  # a node selector no node matches


def ask_signer(api: Any, kubeconfig: str, node_name: str) -> str | None:
    """An approved CSR for a kubelet's client certificate, which a controller-manager signs."""
    with tempfile.TemporaryDirectory() as scratch:
        try:
            mint_node_kubeconfig(api, kubeconfig, node_name, Path(scratch) / "probe")
        except NoNodeCredentials as exc:
            return str(exc)
    return None


def check_node_authorizer(kubeconfig: str, node_name: str) -> None:
    """Node credentials are worth having only where the Node authorizer serves them: as that
    node, list the pods bound to it (what a kubelet does first); NoNodeCredentials if refused."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    try:
        request_json(api, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}&limit=1")
    except ApiError as exc:
        raise NoNodeCredentials(
            f"system:node:{node_name} may not list its pods (no Node authorizer?): {exc}"
        ) from None
    finally:
        api.close()


def ask_scheduler(api: Any, namespace: str, scale: float = 1.0) -> str | None:
    """A pod that fits no node: a scheduler marks it PodScheduled=False (Unschedulable)."""
    path = f"/api/v1/namespaces/{namespace}/pods/kubelet-sim-probe-scheduler"
    pod = {
        "metadata": {"name": path.rsplit("/", 1)[1]},
        "spec": {
            "nodeSelector": _NOWHERE,
            "automountServiceAccountToken": False,
            "containers": [_CONTAINER],
        },
    }
    request_json(api, "POST", path.rsplit("/", 1)[0], pod)

    def scheduled() -> bool:
        conditions = request_json(api, "GET", path).get("status", {}).get("conditions") or []
        return any(c.get("type") == "PodScheduled" for c in conditions)

    try:
        if poll(scheduled, PROBE_DEADLINE * scale):
            return None
    finally:
        request_json(api, "DELETE", path, {"gracePeriodSeconds": 0})
    return (
        f"the cluster runs no scheduler: a pending probe pod got no PodScheduled condition "
        f"within {PROBE_DEADLINE:.0f} s"
    )


# kind → (collection, spec fields beside selector and template, pod spec fields)
_WORKLOADS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "Deployment": ("deployments", {"replicas": 0}, {}),
    "DaemonSet": ("daemonsets", {}, {"nodeSelector": _NOWHERE}),
}


def ask_controller(api: Any, namespace: str, kind: str, scale: float = 1.0) -> str | None:
    """A `kind` object that makes no pods: its controller writes status.observedGeneration."""
    collection, spec, pod_spec = _WORKLOADS[kind]
    labels = {"kubelet-sim.io/probe": kind.lower()}
    body = {
        "metadata": {"name": f"kubelet-sim-probe-{kind.lower()}"},
        "spec": {
            **spec,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {**pod_spec, "containers": [_CONTAINER]},
            },
        },
    }
    path = f"/apis/apps/v1/namespaces/{namespace}/{collection}"
    request_json(api, "POST", path, body)
    path = f"{path}/{body['metadata']['name']}"

    def observed() -> bool:
        return bool(request_json(api, "GET", path).get("status", {}).get("observedGeneration"))

    try:
        if poll(observed, PROBE_DEADLINE * scale):
            return None
    finally:
        request_json(api, "DELETE", path, {"propagationPolicy": "Background"})
    return (
        f"the cluster runs no {kind} controller: a probe {kind} got no status within "
        f"{PROBE_DEADLINE:.0f} s"
    )
