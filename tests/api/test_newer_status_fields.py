"""Status fields of current kubelets, written where the server has them and never sent where
it does not (v1.24): observedGeneration, and a container's resources and allocatedResources."""

from __future__ import annotations

from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest, server_has_field
from tests.pods import container, container_status, get_pod, make_pod, running_ready, wait_status


def test_observed_generation_follows_the_pods_generation(
    cluster: ApiUnderTest, agent: RunningAgent
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


def test_a_running_container_reports_its_resources_where_the_server_has_the_fields(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    resources = {"requests": {"cpu": "50m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
    make_pod(cluster, "sized", container(resources=resources))
    st = container_status(wait_status(cluster, "sized", running_ready, 30, "Running"))
    if not server_has_field(cluster.api, "io.k8s.api.core.v1.ContainerStatus", "resources"):
        assert "resources" not in st  # v1.24: never sent
        assert "allocatedResources" not in st
        return
    assert st["resources"] == resources
    assert st["allocatedResources"] == resources["requests"]
