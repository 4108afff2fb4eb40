"""The fake's two schemas, both captured from real servers: v1.34's (its default) and v1.24's."""

from __future__ import annotations

from tests.fakeapi import FakeApiServer, resources
from tests.fakeapi.openapi import v1_24, v1_34

CORE = "io.k8s.api.core.v1."


def test_v1_34_keeps_every_v1_24_field_and_has_the_newer_ones_with_their_strategies() -> None:
    """All but ObjectMeta's clusterName (removed in v1.25), as the two captures show."""
    old, new = v1_24().definitions, v1_34().definitions
    gone = {
        f"{name}.{field}"
        for name, definition in old.items()
        for field in set(definition.get("properties") or {})
        - set(new[name].get("properties") or {})
    }
    assert gone == {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta.clusterName"}
    assert "restartPolicy" not in old[CORE + "Container"]["properties"]
    assert new[CORE + "Container"]["properties"]["restartPolicy"]["type"] == "string"
    host_ips = new[CORE + "PodStatus"]["properties"]["hostIPs"]
    assert (host_ips["x-kubernetes-patch-strategy"], host_ips["x-kubernetes-patch-merge-key"]) == (
        "merge",
        "ip",
    )
    assert host_ips["items"] == {"$ref": "#/definitions/" + CORE + "HostIP"}
    assert "observedGeneration" in new[CORE + "PodCondition"]["properties"]


def test_a_v1_24_fake_drops_what_the_default_v1_34_one_keeps() -> None:
    sidecar = {"name": "s", "image": "i", "restartPolicy": "Always"}
    pod = {"spec": {"containers": [{"name": "c", "image": "i"}], "initContainers": [sidecar]}}
    with FakeApiServer(schema="v1.24") as older, FakeApiServer() as newer:
        assert older.types.version["minor"] == "24"
        assert newer.types.version["minor"] == "34"
        kept = newer.types.prune_object(resources.PODS, pod)
        dropped = older.types.prune_object(resources.PODS, pod)
    assert kept["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    assert "restartPolicy" not in dropped["spec"]["initContainers"][0]
