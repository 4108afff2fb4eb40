"""kind's own DaemonSets on a virtual node, and what the docs tell kind users to do.

kube-proxy and kindnet tolerate every taint, so the DaemonSet controller binds a pod of each to
a virtual node too. They want the host (hostNetwork, hostPath, a privileged container or
NET_ADMIN) and images from kind's containerd: without --allow-privileged the node refuses them
at admission with the kubelet's reason, message and Warning event, and runs nothing (on both
API servers). docs/kind.md ("kind's own DaemonSets") gives a `kubectl patch` that keeps them
off virtual nodes by the label they register with; on a real control plane it is run here as
written against a kube-proxy-shaped DaemonSet (the DaemonSet controller stops placing it), and
the scheduler is shown to keep the patched pod shape off the node.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.node.host import detect_host
from kubelet_sim.node.node_object import LABEL_VIRTUAL, default_labels
from kubelet_sim.node.settings import NodeSettings
from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest, deadline_scale, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    condition,
    kubelet_events,
    make_pod,
    pod_containers,
    status_of,
    wait_condition,
    wait_for_events,
    wait_status,
)

pytestmark = pytest.mark.docker

KIND_DOC = Path(__file__).resolve().parents[2] / "docs" / "kind.md"
KUBECTL = shutil.which("kubectl")


def kube_proxy_spec() -> Json:
    """The pod template of kubeadm's kube-proxy DaemonSet, as kind creates it."""
    return {
        "priorityClassName": "system-node-critical",
        "containers": [
            {
                "name": "kube-proxy",
                "image": "registry.k8s.io/kube-proxy:v1.24.0",
                "imagePullPolicy": "IfNotPresent",
                "command": [
                    "/usr/local/bin/kube-proxy",
                    "--config=/var/lib/kube-proxy/config.conf",
                    "--hostname-override=$(NODE_NAME)",
                ],
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    {"mountPath": "/var/lib/kube-proxy", "name": "kube-proxy"},
                    {"mountPath": "/run/xtables.lock", "name": "xtables-lock", "readOnly": False},
                    {"mountPath": "/lib/modules", "name": "lib-modules", "readOnly": True},
                ],
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                ],
            }
        ],
        "hostNetwork": True,
        "serviceAccountName": "kube-proxy",
        "volumes": [
            {"name": "kube-proxy", "configMap": {"name": "kube-proxy"}},
            {
                "name": "xtables-lock",
                "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"},
            },
            {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
        ],
        "tolerations": [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"operator": "Exists"},
        ],
        "nodeSelector": {"kubernetes.io/os": "linux"},
    }


def kindnet_spec() -> Json:
    """The pod template of kind's kindnet DaemonSet (its default CNI manifest)."""
    field = {"fieldRef": {"fieldPath": "status.hostIP"}}
    return {
        "hostNetwork": True,
        "tolerations": [{"operator": "Exists"}],
        "serviceAccountName": "kindnet",
        "containers": [
            {
                "name": "kindnet-cni",
                "image": "docker.io/kindest/kindnetd:v20220607-9a4d8d2a",
                "env": [
                    {"name": "HOST_IP", "valueFrom": field},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "POD_SUBNET", "value": "10.244.0.0/16"},
                ],
                "volumeMounts": [
                    {"name": "cni-cfg", "mountPath": "/etc/cni/net.d"},
                    {"name": "xtables-lock", "mountPath": "/run/xtables.lock", "readOnly": False},
                    {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True},
                ],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "50Mi"},
                    "limits": {"cpu": "100m", "memory": "50Mi"},
                },
                "securityContext": {
                    "privileged": False,
                    "capabilities": {"add": ["NET_RAW", "NET_ADMIN"]},
                },
            }
        ],
        "volumes": [
            {"name": "cni-cfg", "hostPath": {"path": "/etc/cni/net.d"}},
            {
                "name": "xtables-lock",
                "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"},
            },
            {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
        ],
    }


def daemon_pod_spec(template: Json, node_name: str) -> Json:
    """What the DaemonSet controller makes of a template for one node: bound there by a
    required node affinity on the node's name (here also by spec.nodeName, as once bound)."""
    on_node = {"key": "metadata.name", "operator": "In", "values": [node_name]}
    required = {"nodeSelectorTerms": [{"matchFields": [on_node]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    return {**template, "affinity": affinity}


def service_account(cluster: ApiUnderTest, name: str) -> None:
    cluster.core.create_namespaced_service_account(cluster.namespace, {"metadata": {"name": name}})


@pytest.mark.parametrize(
    ("name", "template", "what"),
    [
        ("kube-proxy-x7k2p", kube_proxy_spec, "privileged container"),
        (
            "kindnet-q4m9z",
            kindnet_spec,
            'added capabilities [NET_RAW NET_ADMIN] for container "kindnet-cni"',
        ),
    ],
    ids=["kube-proxy", "kindnet"],
)
def test_kinds_daemonset_pods_are_refused_with_the_kubelets_reason_and_event(
    cluster: ApiUnderTest,
    docker_env: DockerEnv,
    agent: RunningAgent,
    name: str,
    template: Any,
    what: str,
) -> None:
    spec = daemon_pod_spec(template(), cluster.node_name)
    service_account(cluster, spec["serviceAccountName"])
    containers = spec.pop("containers")
    # the service account token mounted, as in a DaemonSet's pods (make_pod turns it off)
    pod = make_pod(cluster, name, *containers, automountServiceAccountToken=None, **spec)
    uid = pod["metadata"]["uid"]
    st = wait_status(cluster, name, lambda s: s.get("phase") == "Failed", 20, "refused")
    refusal = f'pod with UID "{uid}" specified {what}, but is disallowed'
    assert (st["reason"], st["message"]) == ("Forbidden", f"Pod was rejected: {refusal}")
    wait_for_events(cluster, name, "Forbidden")
    events = [(e.type, e.reason, e.message) for e in kubelet_events(cluster, name)]
    assert events == [("Warning", "Forbidden", refusal)]  # no pull, no sandbox: nothing ran
    assert not pod_containers(docker_env, uid)


# --- what docs/kind.md tells kind users to do -------------------------------------------------


def doc_patch() -> list[str]:
    """docs/kind.md's `kubectl patch` line, as arguments (`$ds` stays as written)."""
    lines = [line.strip() for line in KIND_DOC.read_text().splitlines()]
    (line,) = [x for x in lines if x.startswith("kubectl ") and " patch daemonset " in x]
    assert "for ds in kube-proxy kindnet; do" in lines
    return shlex.split(line)


def doc_affinity() -> Json:
    args = doc_patch()
    body = json.loads(args[args.index("-p") + 1])
    return dict(body["spec"]["template"]["spec"]["affinity"])


def test_the_documented_patch_excludes_the_label_every_virtual_node_registers_with() -> None:
    required = doc_affinity()["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": LABEL_VIRTUAL, "operator": "DoesNotExist"}]}
    ]
    assert LABEL_VIRTUAL in default_labels(NodeSettings(node_name="n1"), detect_host())


def _forbidden_daemon_pod(cluster: ApiUnderTest, prefix: str) -> bool:
    events = cluster.core.list_namespaced_event(cluster.namespace).items
    return any(
        e.reason == "Forbidden"
        and e.source.component == "kubelet"
        and e.involved_object.name.startswith(prefix)
        for e in events
    )


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed here")
def test_the_documented_patch_stops_the_daemonset_controller_placing_kube_proxy_here(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    """The DaemonSet is kind's kube-proxy with one addition: a nodeSelector on this test's
    node, so that it stays off the other tests' virtual nodes in a shared cluster."""
    from kubernetes.client import AppsV1Api

    cluster.require_controller("DaemonSet")  # whose pods the scheduler binds (v1.24)
    cluster.require_scheduler()
    apps = AppsV1Api(cluster.api)
    service_account(cluster, "kube-proxy")
    template = kube_proxy_spec()
    template["nodeSelector"]["kubernetes.io/hostname"] = cluster.node_name
    labels = {"k8s-app": "kube-proxy"}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": labels}, "spec": template},
        },
    }
    apps.create_namespaced_daemon_set(cluster.namespace, daemonset)
    wait_for(
        lambda: _forbidden_daemon_pod(cluster, "kube-proxy-"),
        30,
        "the DaemonSet's pod bound to the virtual node and refused there",
    )

    args = doc_patch()
    args[args.index("-n") + 1] = cluster.namespace
    args[args.index("$ds")] = "kube-proxy"
    patched = subprocess.run(
        [str(KUBECTL), "--kubeconfig", cluster.kubeconfig, *args[1:]],
        capture_output=True,
        check=False,
        timeout=30 * deadline_scale(),
    )
    assert patched.returncode == 0, patched.stderr

    def placed_nowhere() -> bool:
        status = apps.read_namespaced_daemon_set(daemonset["metadata"]["name"], cluster.namespace)
        pods = cluster.core.list_namespaced_pod(cluster.namespace, label_selector="k8s-app").items
        return status.status.desired_number_scheduled == 0 and not pods

    wait_for(placed_nowhere, 30, "no node for the DaemonSet, and its refused pod gone")


def test_the_scheduler_keeps_the_patched_pod_shape_off_the_virtual_node(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    """Two pods of kube-proxy's shape that may go only to this node (a nodeSelector on its
    name): the unpatched one is bound here and refused; the patched one is not scheduled."""
    cluster.require_scheduler()
    service_account(cluster, "kube-proxy")
    template = kube_proxy_spec()
    template["nodeSelector"]["kubernetes.io/hostname"] = cluster.node_name
    for name, spec in (
        ("unpatched", template),
        ("patched", {**template, "affinity": doc_affinity()}),
    ):
        cluster.core.create_namespaced_pod(
            cluster.namespace, {"metadata": {"name": name}, "spec": spec}
        )
    refused = wait_status(cluster, "unpatched", lambda s: s.get("phase") == "Failed", 30, "refused")
    assert refused["reason"] == "Forbidden"
    unschedulable = wait_condition(cluster, "patched", "PodScheduled", reason="Unschedulable")
    assert "node affinity" in condition(unschedulable, "PodScheduled")["message"]
    assert not cluster.core.read_namespaced_pod("patched", cluster.namespace).spec.node_name
    assert status_of(cluster, "patched").get("phase") == "Pending"
