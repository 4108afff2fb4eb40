"""The process's Docker engine apart from each node's runtime on it, on a fake Docker client:
what is the engine's is done once for every node, what is a node's is labelled and counted as
its own. Against a real engine: tests/runtime/ (test_docker_runtime.py, the runtime contract)."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound, NotFound

from kubelet_sim import cri
from kubelet_sim.runtime import translate
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.runtime.node_streams import NodeStreams
from kubelet_sim.server.ports import ContainerStreams

IMAGE_SHA = "sha256:" + "ab" * 32


class FakeApi:
    """The part of docker-py's APIClient the runtimes call, in memory; counts each call."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.containers_by_id: dict[str, dict[str, Any]] = {}
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.event_filters: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def add(self, labels: dict[str, str], name: str = "/c") -> str:
        container_id = f"{next(self._ids):064x}"
        self.containers_by_id[container_id] = {
            "Id": container_id,
            "Name": name,
            "Image": IMAGE_SHA,
            "Config": {"Labels": labels, "Image": "busybox"},
            "State": {"Status": "running", "Running": True, "Pid": 42},
            "HostConfig": {},
            "NetworkSettings": {"Networks": {"kind": {"IPAddress": "10.0.0.9"}}},
        }
        return container_id

    def inspect_image(self, ref: str) -> dict[str, Any]:
        self.calls["inspect_image"] += 1
        if ref != IMAGE_SHA:
            raise ImageNotFound(ref)
        return {"Id": IMAGE_SHA, "RepoDigests": ["busybox@sha256:" + "cd" * 32]}

    def images(self) -> list[dict[str, Any]]:
        self.calls["images"] += 1
        return [{"Id": IMAGE_SHA, "RepoTags": ["busybox:1"], "Size": 7}]

    def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls["containers"] += 1
        wanted = filters["label"]
        wanted = [wanted] if isinstance(wanted, str) else wanted
        listed = []
        for attrs in self.containers_by_id.values():
            labels = attrs["Config"]["Labels"]
            if all_match(labels, wanted):
                listed.append({"Id": attrs["Id"], "Labels": labels, "Names": [attrs["Name"]]})
        return listed

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        self.calls["inspect_container"] += 1
        if container_id not in self.containers_by_id:
            raise NotFound(container_id)
        return self.containers_by_id[container_id]

    def create_container_from_config(self, body: dict[str, Any], name: str) -> dict[str, str]:
        self.created.append((name, body))
        return {"Id": self.add(body.get("Labels") or {}, "/" + name)}

    def start(self, container_id: str) -> None:
        self.calls["start"] += 1

    def remove_container(self, container_id: str, v: bool = False, force: bool = False) -> None:
        self.containers_by_id.pop(container_id, None)

    def logs(self, container_id: str, **options: Any) -> Iterator[bytes]:
        if container_id not in self.containers_by_id:
            raise NotFound(container_id)
        return iter([b"hello\n"])

    def events(self, decode: bool, filters: dict[str, Any], since: str) -> Iterator[Any]:
        self.event_filters.append(filters)
        return iter([])


def all_match(labels: dict[str, str], selectors: list[str]) -> bool:
    for selector in selectors:
        key, _, value = selector.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


class FakeClient:
    def __init__(self) -> None:
        self.api = FakeApi()

    def ping(self) -> bool:
        return True

    def version(self) -> dict[str, str]:
        return {"Version": "27.0.0"}


@pytest.fixture
def engine() -> DockerEngine:
    return DockerEngine(FakeClient(), network="kind")  # type: ignore[arg-type]


def _api(engine: DockerEngine) -> FakeApi:
    api = engine.api
    assert isinstance(api, FakeApi)
    return api


def _node(engine: DockerEngine, name: str, tmp: Path, **kw: Any) -> NodeRuntime:
    return NodeRuntime(engine, node_name=name, root_dir=tmp / name, **kw)


def _labels(node: str, uid: str, **extra: str) -> dict[str, str]:
    return {
        cri.LABEL_NODE: node,
        cri.LABEL_POD_UID: uid,
        cri.LABEL_POD_NAME: "web",
        cri.LABEL_POD_NAMESPACE: "default",
        cri.LABEL_CONTAINER_NAME: "app",
        cri.LABEL_CONTAINER_TYPE: "container",
        **extra,
    }


def test_an_image_is_inspected_once_for_every_node_and_counted_where_asked(
    engine: DockerEngine, tmp_path: Path
) -> None:
    api = _api(engine)
    n1, n2 = _node(engine, "n1", tmp_path), _node(engine, "n2", tmp_path)
    first = n1.inspect(api.add(_labels("n1", "u1")))
    second = n2.inspect(api.add(_labels("n2", "u2")))
    assert first is not None
    assert second is not None
    assert first.image_id == second.image_id == f"docker-pullable://busybox@sha256:{'cd' * 32}"
    assert api.calls["inspect_image"] == 1, "the engine's images are the engine's, once"
    assert (n1.stats.image_inspects, n2.stats.image_inspects) == (1, 0)
    assert (n1.stats.inspects, n2.stats.inspects) == (1, 1)


def test_a_sandbox_is_made_with_the_nodes_name_labels_and_the_engines_network(
    engine: DockerEngine, tmp_path: Path
) -> None:
    api = _api(engine)
    node = _node(engine, "n1", tmp_path, owner_labels={cri.LABEL_OWNER: "demo-1"})
    cfg = cri.SandboxConfig(
        pod=cri.PodRef(node="n1", name="web", namespace="default", uid="u1"),
        attempt=0,
        image="pause",
        hostname="web",
    )
    observed = node.run_sandbox(cfg)
    ((name, body),) = api.created
    assert name == translate.sandbox_name(cfg)
    assert body["Labels"][cri.LABEL_NODE] == "n1"
    assert body["Labels"][cri.LABEL_OWNER] == "demo-1"
    assert body["HostConfig"]["NetworkMode"] == "kind"
    assert observed.ip == "10.0.0.9"
    assert (node.stats.creates, node.stats.starts) == (1, 1)


def test_each_node_lists_only_its_own_containers(engine: DockerEngine, tmp_path: Path) -> None:
    api = _api(engine)
    mine = api.add(_labels("n1", "u1"))
    api.add(_labels("n2", "u2"))  # another node's
    api.add(_labels("n1", "u3", **{cri.LABEL_OWNER: "demo-1"}))  # the demo's n1, not ours
    plain = _node(engine, "n1", tmp_path)
    assert [c.id for c in plain.list_containers()] == [mine]
    everyone = _node(engine, "n1", tmp_path, owner_labels=None)
    assert len(everyone.list_containers()) == 2


def test_the_engine_counts_its_own_calls_and_each_node_its_own(
    engine: DockerEngine, tmp_path: Path
) -> None:
    n1 = _node(engine, "n1", tmp_path)
    assert [i.repo_tags for i in engine.list_images()] == [("busybox:1",)]
    n1.list_images()
    n1.list_images()
    assert (engine.stats.image_lists, n1.stats.image_lists) == (1, 2)
    assert engine.version() == "27.0.0"
    assert engine.ping()


def test_the_engine_and_a_node_runtime_are_fixed_once_made(
    engine: DockerEngine, tmp_path: Path
) -> None:
    node = _node(engine, "n1", tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        engine.network = "bridge"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.owner_labels = None  # type: ignore[misc]
    assert node.engine is engine
    assert _node(engine, "n2", tmp_path).engine.images is node.engine.images


def test_a_nodes_streams_are_the_servers_port_and_count_as_the_nodes(
    engine: DockerEngine, tmp_path: Path
) -> None:
    api = _api(engine)
    node = _node(engine, "n1", tmp_path)
    streams: ContainerStreams = node.streams  # what the kubelet API server is given
    assert isinstance(streams, NodeStreams)
    container_id = api.add(_labels("n1", "u1"))
    assert list(streams.container_logs(container_id, cri.LogOptions(tail=10))) == [b"hello\n"]
    with pytest.raises(cri.ContainerNotFound):
        streams.container_logs("gone", cri.LogOptions())
    assert node.stats.logs == 2
    assert engine.stats.logs == 0
    wanted = {"container_logs", "exec_stream", "attach_stream", "pod_connect"}
    assert {n for n in wanted if callable(getattr(NodeStreams, n, None))} == wanted


def test_the_events_stream_is_the_engines_for_every_node(engine: DockerEngine) -> None:
    api = _api(engine)
    engine.events(cri.LABEL_NODE, "0.000000000")
    assert api.event_filters == [{"type": "container", "label": cri.LABEL_NODE}]
