"""The fake's two schemas: v1.24's as captured, and a current server's built from the client."""

from __future__ import annotations

from tests.fakeapi import FakeApiServer, resources
from tests.fakeapi.schemas import current, v1_24

CORE = "io.k8s.api.core.v1."


def test_the_current_schema_keeps_every_v1_24_field_and_adds_the_newer_ones() -> None:
    old, new = v1_24().definitions, current().definitions
    for name, definition in old.items():
        assert set(definition.get("properties") or {}) <= set(new[name].get("properties") or {})
    container = new[CORE + "Container"]["properties"]
    assert "restartPolicy" not in old[CORE + "Container"]["properties"]
    assert container["restartPolicy"] == {"type": "string"}
    host_ips = new[CORE + "PodStatus"]["properties"]["hostIPs"]
    assert (host_ips["x-kubernetes-patch-strategy"], host_ips["x-kubernetes-patch-merge-key"]) == (
        "merge",
        "ip",
    )
    assert host_ips["items"] == {"$ref": "#/definitions/" + CORE + "HostIP"}
    assert new[CORE + "HostIP"]["properties"]["ip"] == {"type": "string"}
    assert "observedGeneration" in new[CORE + "PodCondition"]["properties"]


def test_a_v1_24_fake_drops_what_a_current_one_keeps() -> None:
    sidecar = {"name": "s", "image": "i", "restartPolicy": "Always"}
    pod = {"spec": {"containers": [{"name": "c", "image": "i"}], "initContainers": [sidecar]}}
    with FakeApiServer(schema="v1.24") as older, FakeApiServer() as newer:
        assert older.types.version["minor"] == "24"
        assert int(newer.types.version["minor"]) >= 29
        kept = newer.types.prune_object(resources.PODS, pod)
        dropped = older.types.prune_object(resources.PODS, pod)
    assert kept["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    assert "restartPolicy" not in dropped["spec"]["initContainers"][0]
