"""A static pod on our node reads as the real kubelet's does from the same manifest: the
mirror pod's name, annotations, owner and tolerations, and its status as `compare` sees it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubelet_sim.compare.states import normalise
from kubelet_sim.controlplane.reference_node import ReferenceNode
from tests.cluster import ApiUnderTest, wait_for
from tests.pod_lifecycle.test_static_pods import StaticNode, static_node  # noqa: F401 (the fixture)
from tests.pods import get_pod, running_ready

pytestmark = pytest.mark.docker

KUBELET_ANNOTATIONS = ("config.hash", "config.mirror", "config.seen", "config.source")


def _shape(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """What should be the same on both nodes: names and uids told by the node's own."""
    meta, spec = pod["metadata"], pod["spec"]
    owners = [
        {k: v for k, v in owner.items() if k not in ("name", "uid")}
        for owner in meta.get("ownerReferences") or []
    ]
    annotations = meta.get("annotations") or {}
    return {
        "suffix": meta["name"].removesuffix(f"-{node}") != meta["name"],
        "annotations": sorted(k for k in annotations if k.startswith("kubernetes.io/")),
        "mirror_is_hash": annotations.get("kubernetes.io/config.mirror")
        == annotations.get("kubernetes.io/config.hash"),
        "source": annotations.get("kubernetes.io/config.source"),
        "owners": owners,
        "tolerations": spec.get("tolerations"),
        "state": normalise(pod).as_dict(),
    }


def test_a_static_pod_and_its_mirror_read_as_the_kubelets(
    static_node: StaticNode,  # noqa: F811
    reference_node: ReferenceNode,
    cluster: ApiUnderTest,
) -> None:
    assert reference_node.static_pod_path is not None
    static_node.write("web")
    ours = static_node.running_mirror("web")
    manifest = static_node.manifests / "web.yaml"
    theirs_file = reference_node.static_pod_path / "web.json"
    body = json.loads(manifest.read_text())
    body["spec"]["containers"][0]["image"] = reference_node.busybox_image
    theirs_file.write_text(json.dumps(body))
    try:
        name = f"web-{reference_node.name}"

        def mirror() -> dict[str, Any] | None:
            pod = get_pod(cluster, name)
            return pod if pod is not None and running_ready(pod.get("status") or {}) else None

        theirs = wait_for(mirror, 60, "the kubelet's mirror pod Running and Ready")
        ours = static_node.running_mirror("web")
        assert _shape(ours, cluster.node_name) == _shape(theirs, reference_node.name)
        assert all(
            f"kubernetes.io/{k}" in theirs["metadata"]["annotations"] for k in KUBELET_ANNOTATIONS
        )
    finally:
        theirs_file.unlink()
        wait_for(lambda: get_pod(cluster, f"web-{reference_node.name}") is None, 60, "gone")
