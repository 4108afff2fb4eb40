"""How pods end and what they report: as the kubelet ends them, whatever stage they reached."""

from __future__ import annotations

from typing import Any

from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest, kubelet_generation
from tests.pods import container_status, make_pod, wait_status

FINALIZER = "kubelet-sim.io/test-keeps-the-pod"


def _release(cluster: ApiUnderTest, name: str) -> None:
    cluster.core.patch_namespaced_pod(name, cluster.namespace, {"metadata": {"finalizers": None}})


def test_a_pod_deleted_before_it_started_ends_failed(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    """TerminatePod: Failed, and the container that never ran is ContainerStatusUnknown.

    A finalizer keeps the pod readable after the node's final delete; its ConfigMap volume
    does not exist, so the container never starts.
    """
    make_pod(
        cluster,
        "never-ran",
        volumes=[{"name": "cfg", "configMap": {"name": "absent"}}],
    )
    cluster.core.patch_namespaced_pod(
        "never-ran", cluster.namespace, {"metadata": {"finalizers": [FINALIZER]}}
    )
    try:
        wait_status(
            cluster,
            "never-ran",
            lambda s: (
                container_status(s).get("state", {}).get("waiting", {}).get("reason")
                == "ContainerCreating"
            ),
            20,
            "waiting for its volume",
        )
        cluster.core.delete_namespaced_pod("never-ran", cluster.namespace)
        # Before v1.27 TerminatePod leaves the phase as it was (the v1.24 kubelet's is Pending).
        phase = "Failed" if kubelet_generation(cluster).terminal_phase else "Pending"

        def ended(s: dict[str, Any]) -> bool:
            return s.get("phase") == phase and "terminated" in container_status(s)["state"]

        st = wait_status(cluster, "never-ran", ended, 20, f"{phase}, its container terminated")
        assert container_status(st)["state"] == {
            "terminated": {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was terminated",
                "startedAt": None,
                "finishedAt": None,
            }
        }
    finally:
        _release(cluster, "never-ran")
