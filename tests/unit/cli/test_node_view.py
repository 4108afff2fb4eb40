"""The Node object beside the reference kubelet's (compare/node_view.py), and the node rules it
found: nodeInfo.kubeProxyVersion by kubelet version, the system UUID's fallback."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from kubelet_sim.compare.node_view import compare_nodes
from kubelet_sim.node.host import system_uuid
from kubelet_sim.node.node_object import KUBELET_VERSION, node_info
from kubelet_sim.pod.generation import KubeletGeneration
from tests.node.test_node_object import HOST


def _node(name: str, **info: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"taints": [{"key": f"{name}/t", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status", "lastHeartbeatTime": name},
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.0.0.{len(name)}"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": len(name) + 10000}},
            "nodeInfo": {"machineID": "m", "systemUUID": "m", "kubeProxyVersion": "",
                         "kubeletVersion": "v1.34.9", **info},
            "capacity": {"cpu": "2", "pods": "110"},
            "images": [{"names": ["busybox"], "sizeBytes": 2000}],
        },
    }  # fmt: skip


def test_two_nodes_alike_but_for_names_addresses_ports_and_times_agree() -> None:
    ours = _node("n1", kubeletVersion="v1.34.0+kubelet-sim-0.1.0")
    ours["status"]["images"] = [{"names": ["other"], "sizeBytes": 9}]
    result = compare_nodes(ours, _node("kubelet-ref"))
    assert result.differs == []
    assert result.agrees
    assert [f.field for f in result.by_nature] == ["spec.taints"]
    assert "--register-with-taints" in result.by_nature[0].why


def test_a_field_that_differs_is_ours_to_explain_unless_it_differs_by_nature() -> None:
    ours = _node("n1", systemUUID="", containerRuntimeVersion="docker://28.2")
    reference = _node("ref", containerRuntimeVersion="containerd://1.6.20")
    ready = reference["status"]["conditions"][0]
    ready["message"] = "kubelet is posting ready status. AppArmor enabled"
    result = compare_nodes(ours, reference)
    differs = {f.field: (f.ours, f.reference) for f in result.differs}
    assert differs == {
        "status.nodeInfo.systemUUID": ("", "m"),
        "status.conditions.Ready": (
            "True | KubeletReady | kubelet is posting ready status",
            "True | KubeletReady | kubelet is posting ready status. AppArmor enabled",
        ),
    }
    runtime = next(f for f in result.by_nature if f.field.endswith("containerRuntimeVersion"))
    assert (runtime.ours, runtime.reference) == ("docker", "containerd")
    assert "Docker engine" in runtime.why
    assert not result.agrees


def test_a_field_only_one_node_has_is_a_difference() -> None:
    reference = _node("ref")
    reference["status"]["runtimeHandlers"] = [{"name": "runc"}]
    result = compare_nodes(_node("n1"), reference)
    assert [(f.field, f.ours) for f in result.differs] == [("status.runtimeHandlers", "(absent)")]


def test_copying_a_node_changes_nothing() -> None:
    node = _node("n1")
    assert compare_nodes(node, copy.deepcopy(node)).by_nature == []


def test_kube_proxy_version_is_the_kubelets_until_v1_30_and_empty_since_v1_31() -> None:
    # The rig's v1.24 kubelet writes its version there; its v1.34 one writes "".
    assert node_info(HOST, "28.2", KubeletGeneration(24))["kubeProxyVersion"] == KUBELET_VERSION
    assert node_info(HOST, "28.2", KubeletGeneration(30))["kubeProxyVersion"] == KUBELET_VERSION
    assert node_info(HOST, "28.2", KubeletGeneration(31))["kubeProxyVersion"] == ""
    assert node_info(HOST, "28.2", KubeletGeneration(34))["kubeProxyVersion"] == ""


def test_the_system_uuid_falls_back_to_the_machine_id_as_cadvisor_reads_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("3d1219c7\n")
    assert system_uuid(str(tmp_path)) == "3d1219c7"  # no DMI (a VM without it)
    dmi = tmp_path / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_uuid").write_text("ec2a-11\n")
    assert system_uuid(str(tmp_path)) == "ec2a-11"
