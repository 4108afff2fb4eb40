"""Static pods end to end: manifests in `--pod-manifest-path` run as Docker containers, each with
a mirror pod in the API made with the node's credentials (on the fake and on a real server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import cri
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    container,
    container_status,
    event_messages,
    get_pod,
    kubelet_events,
    pod_containers,
    running_ready,
)

pytestmark = pytest.mark.docker

MIRROR = "kubernetes.io/config.mirror"
HASH = "kubernetes.io/config.hash"


@dataclass
class StaticNode:
    agent: RunningAgent
    manifests: Path
    cluster: ApiUnderTest
    docker_env: DockerEnv

    def write(self, name: str, **spec: Any) -> Path:
        """A manifest for pod `name` in the test's namespace (a file written whole, at once)."""
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.cluster.namespace},
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [container()], **spec},
        }
        path = self.manifests / f"{name}.yaml"
        scratch = self.manifests / f".{name}.tmp"  # a dotfile: never read
        scratch.write_text(json.dumps(body))
        scratch.replace(path)
        return path

    def mirror_name(self, name: str) -> str:
        return f"{name}-{self.cluster.node_name}"

    def running_mirror(self, name: str, not_hash: str = "", not_uid: str = "") -> dict[str, Any]:
        """The mirror pod once it says Running and Ready (of another hash or uid than given)."""

        def ready() -> dict[str, Any] | None:
            pod = get_pod(self.cluster, self.mirror_name(name))
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return None
            meta = pod["metadata"]
            if meta["annotations"].get(MIRROR) == not_hash or meta["uid"] == not_uid:
                return None
            return pod if running_ready(pod.get("status") or {}) else None

        found: dict[str, Any] = wait_for(ready, 40, f"mirror pod of {name} Running and Ready")
        return found

    def app_containers(self, uid: str) -> list[Any]:
        return [
            c
            for c in pod_containers(self.docker_env, uid)
            if c.labels.get(cri.LABEL_CONTAINER_NAME) != cri.SANDBOX_CONTAINER_NAME
        ]

    def running(self, uid: str) -> list[Any]:
        return [c for c in pod_containers(self.docker_env, uid) if c.status == "running"]


@pytest.fixture
def static_node(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> Iterator[StaticNode]:
    cluster.require_node_credentials()  # mirror pods are made as the node (NodeRestriction)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    manifests.chmod(0o755)  # only its owner may write it, whatever the umask: else not read
    running = start_agent(cluster, docker_env, tmp_path / "root", pod_manifest_path=manifests)
    yield StaticNode(running, manifests, cluster, docker_env)
    if running.thread.is_alive():
        running.stop()


def test_a_manifest_runs_with_a_mirror_pod_owned_by_the_node(static_node: StaticNode) -> None:
    cluster = static_node.cluster
    static_node.write("web")
    mirror = static_node.running_mirror("web")
    meta, spec = mirror["metadata"], mirror["spec"]
    annotations = meta["annotations"]
    static_uid = annotations[HASH]
    assert meta["name"] == f"web-{cluster.node_name}"
    assert annotations["kubernetes.io/config.source"] == "file"
    assert annotations[MIRROR] == static_uid
    assert annotations["kubernetes.io/config.seen"]
    assert meta["uid"] != static_uid  # the server's own: status is translated to it
    node = cluster.core.read_node(cluster.node_name)
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": cluster.node_name,
            "uid": node.metadata.uid,
            "controller": True,
        }
    ]
    assert spec["nodeName"] == cluster.node_name
    assert {"operator": "Exists", "effect": "NoExecute"} in spec["tolerations"]
    assert not spec.get("serviceAccountName")
    # The containers run under the static pod's UID; the mirror is never run for itself.
    (app,) = static_node.app_containers(static_uid)
    assert app.status == "running"
    assert pod_containers(static_node.docker_env, meta["uid"]) == []
    uids = {p["metadata"]["uid"] for p in static_node.agent.agent.pods.pods()}
    assert static_uid in uids
    assert meta["uid"] not in uids
    assert container_status(mirror["status"])["containerID"] == f"docker://{app.id}"


def test_a_bad_manifest_is_told_and_stops_no_other_static_pod(static_node: StaticNode) -> None:
    """`annotations: [x]` in one manifest once stopped every static pod of the node from
    updating: it is logged and skipped, the others run; a second manifest of a name already
    taken gets the kubelet's FailedValidation event."""
    cluster = static_node.cluster
    bad = static_node.manifests / "bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad, annotations: [x]}\n"
        "spec: {containers: [{name: c, image: busybox}]}\n"
    )
    static_node.write("web")
    first = static_node.running_mirror("web")
    twin = static_node.manifests / "zz-twin.json"  # after web.yaml: web.yaml wins
    body = json.loads((static_node.manifests / "web.yaml").read_text())
    body["spec"]["restartPolicy"] = "Never"
    twin.write_text(json.dumps(body))
    name = static_node.mirror_name("web")
    wait_for(lambda: event_messages(cluster, name, "FailedValidation"), 20, "FailedValidation told")
    (told,) = [e for e in kubelet_events(cluster, name) if e.reason == "FailedValidation"]
    assert told.type == "Warning"
    assert told.message.endswith(f'from file due to duplicate pod name "{name}", ignoring')
    static_node.write("web", restartPolicy="OnFailure")  # an update still goes through
    static_node.running_mirror("web", not_hash=first["metadata"]["annotations"][MIRROR])
    assert get_pod(cluster, f"bad-{cluster.node_name}") is None


def test_a_changed_manifest_replaces_the_pod_and_its_mirror(static_node: StaticNode) -> None:
    static_node.write("web")
    first = static_node.running_mirror("web")
    old_uid = first["metadata"]["annotations"][HASH]
    static_node.write("web", containers=[container(env=[{"name": "VERSION", "value": "2"}])])
    second = static_node.running_mirror("web", not_hash=old_uid)
    new_uid = second["metadata"]["annotations"][HASH]
    assert new_uid != old_uid
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert second["metadata"]["annotations"][MIRROR] == new_uid
    assert second["spec"]["containers"][0]["env"] == [{"name": "VERSION", "value": "2"}]
    (app,) = static_node.app_containers(new_uid)
    assert app.status == "running"
    wait_for(lambda: not static_node.running(old_uid), 20, "the old version's containers stopped")


def test_a_deleted_mirror_comes_back_and_the_pod_runs_on(static_node: StaticNode) -> None:
    cluster = static_node.cluster
    static_node.write("web")
    first = static_node.running_mirror("web")
    static_uid = first["metadata"]["annotations"][HASH]
    (app,) = static_node.app_containers(static_uid)
    cluster.core.delete_namespaced_pod(static_node.mirror_name("web"), cluster.namespace)
    again = static_node.running_mirror("web", not_uid=first["metadata"]["uid"])
    assert again["metadata"]["annotations"][MIRROR] == static_uid
    status = container_status(again["status"])
    assert status["containerID"] == f"docker://{app.id}"
    assert status["restartCount"] == 0
    assert again["status"]["startTime"] == first["status"]["startTime"]
    assert [(c.id, c.status) for c in static_node.app_containers(static_uid)] == [
        (app.id, "running")
    ]


def test_a_removed_manifest_stops_the_pod_and_deletes_its_mirror(static_node: StaticNode) -> None:
    cluster = static_node.cluster
    path = static_node.write("web")
    mirror = static_node.running_mirror("web")
    static_uid = mirror["metadata"]["annotations"][HASH]
    assert static_node.running(static_uid)
    path.unlink()
    wait_for(
        lambda: get_pod(cluster, static_node.mirror_name("web")) is None,
        30,
        "the mirror pod deleted",
    )
    wait_for(
        lambda: pod_containers(static_node.docker_env, static_uid) == [],
        30,
        "the static pod's containers removed",
    )
    uids = {p["metadata"]["uid"] for p in static_node.agent.agent.pods.pods()}
    assert static_uid not in uids


def test_a_node_creates_only_mirror_pods_owned_by_itself(static_node: StaticNode) -> None:
    """NodeRestriction, which the fake holds as a real server does: without the mirror
    annotation, or owned by another UID than its Node's, the node's create is refused."""
    from kubelet_sim.kube.client import connect
    from kubelet_sim.kube.pod_api import MirrorPodApi
    from kubelet_sim.kube.rest import ApiError

    cluster = static_node.cluster
    api = MirrorPodApi(connect(cluster.node_kubeconfig).api)
    node_uid = cluster.core.read_node(cluster.node_name).metadata.uid

    def body(name: str, annotations: dict[str, str], owner_uid: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": cluster.namespace,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": cluster.node_name,
                        "uid": owner_uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {"nodeName": cluster.node_name, "containers": [container()]},
        }

    for refused in (body("plain", {}, node_uid), body("alien", {MIRROR: "x"}, "not-the-node")):
        with pytest.raises(ApiError) as answer:
            api.create(refused)
        assert answer.value.status == 403, answer.value
    created = api.create(body("mirror", {MIRROR: "x"}, node_uid))
    assert created["metadata"]["annotations"][MIRROR] == "x"
    assert not created["spec"].get("serviceAccountName")  # no account for a mirror pod


def test_nodes_of_one_process_run_the_manifests_and_a_restart_adopts_them(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """`--pod-manifest-path` from the command line, for two nodes of one process (the static
    pods' poller on the set's shared timers); a restarted process finds the same UIDs (the
    hash), adopts the running containers and keeps the mirrors."""
    import contextlib

    from kubelet_sim.runtime.local_images import PAUSE_IMAGE
    from tests.agent_process import AgentProcess

    manifests = tmp_path / "manifests"
    manifests.mkdir()
    manifests.chmod(0o755)  # only its owner may write it, whatever the umask: else not read
    names = [f"{cluster.node_name}-a", f"{cluster.node_name}-b"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": cluster.namespace},
        "spec": {"terminationGracePeriodSeconds": 5, "containers": [container()]},
    }
    (manifests / "web.yaml").write_text(json.dumps(body))
    args = [
        *[arg for name in names for arg in ("--node-name", name)],
        *("--kubeconfig", cluster.kubeconfig, "--log-format", "json"),
        *("--pod-infra-image", PAUSE_IMAGE, "--sandbox-pool-size", "0"),
        *("--pod-manifest-path", str(manifests), "--root-dir", str(tmp_path / "root")),
    ]

    def mirrors() -> dict[str, dict[str, Any]] | None:
        found = {name: get_pod(cluster, f"web-{name}") for name in names}
        if all(p and running_ready(p.get("status") or {}) for p in found.values()):
            return {name: pod for name, pod in found.items() if pod is not None}
        return None

    def running_ids() -> set[str]:
        return {c.id for name in names for c in docker_env.containers_of_node(name)}

    try:
        for _ in range(2):
            agent = AgentProcess(args)
            try:
                wait_for(
                    lambda a=agent: sum(r.get("event") == "running" for r in a.records()) == 2,
                    60,
                    "both nodes running",
                )
                seen = wait_for(mirrors, 60, "both mirror pods Running and Ready")
                ids = running_ids()
                if _ == 0:
                    first, before = seen, ids
            finally:
                if agent.proc.poll() is None:
                    assert agent.terminate() == 0, "\n".join(agent.lines[-10:])
        assert len(before) == 4  # a sandbox and a container per node
        assert ids == before, "the restarted process adopted the static pods' containers"
        for name in names:
            hash_ = first[name]["metadata"]["annotations"][HASH]
            assert seen[name]["metadata"]["annotations"][MIRROR] == hash_
            assert seen[name]["metadata"]["uid"] == first[name]["metadata"]["uid"]
    finally:
        for name in names:
            docker_env.remove_labelled(f"{cri.LABEL_NODE}={name}")
            with contextlib.suppress(Exception):
                cluster.core.delete_node(name)
