"""status.observedGeneration: the pod generation the node last acted on (v1.33+ servers count
a pod's generations; v1.24 keeps none, and then the node writes none)."""

from __future__ import annotations

from tests.agent_fixture import RunningAgent
from tests.cluster import Cluster
from tests.pods import get_pod, make_pod, running_ready, wait_status


def test_observed_generation_follows_the_pods_generation(
    cluster: Cluster, agent: RunningAgent
) -> None:
    created = make_pod(cluster, "gen")
    st = wait_status(cluster, "gen", running_ready, 30, "Running and Ready")
    generation = created["metadata"].get("generation")
    if generation is None:  # v1.24: nothing to observe, and no field the server would drop
        assert "observedGeneration" not in st
        assert all("observedGeneration" not in c for c in st["conditions"])
        return
    assert generation == 1
    assert st["observedGeneration"] == 1
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert ready["observedGeneration"] == 1
    cluster.core.patch_namespaced_pod(
        "gen", cluster.namespace, {"spec": {"activeDeadlineSeconds": 600}}
    )
    pod = get_pod(cluster, "gen")
    assert pod is not None
    assert pod["metadata"]["generation"] == 2
    wait_status(
        cluster, "gen", lambda s: s.get("observedGeneration") == 2, 10, "generation 2 observed"
    )
