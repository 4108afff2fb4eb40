"""Joining a user's cluster never adopts or deletes what the session did not make (issue 41,
item 1): a Node of our nodes' names is refused, not taken over; only Nodes (and the
ClusterRoleBinding) the session created are deleted, each by its UID."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet_sim.kube.client import KubeConnection, connect
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.rest import ApiError, read_json, request_json
from kubelet_sim.node.host import detect_host
from kubelet_sim.node.node_object import ANNOTATION_CREATOR, LABEL_VIRTUAL
from kubelet_sim.node.registration import NotOurNode, Registrar
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.testing import cluster as testing
from kubelet_sim.testing import joined
from tests.cluster import ApiUnderTest

pytestmark = [pytest.mark.docker]


@pytest.fixture
def admin(cluster: ApiUnderTest) -> Iterator[KubeConnection]:
    connection = connect(cluster.kubeconfig)
    yield connection
    connection.api.close()


def _node(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"made-by": "someone-else"}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


@contextlib.contextmanager
def _nodes(admin: KubeConnection, *bodies: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    made = [request_json(admin.api, "POST", "/api/v1/nodes", body) for body in bodies]
    try:
        yield made
    finally:
        for node in made:
            with contextlib.suppress(ApiError):
                request_json(admin.api, "DELETE", f"/api/v1/nodes/{node['metadata']['name']}")


def _get(admin: KubeConnection, path: str) -> dict[str, Any] | None:
    return read_json(admin.api, path)


def test_a_session_refuses_to_join_where_a_node_of_its_names_exists(
    cluster: ApiUnderTest, admin: KubeConnection
) -> None:
    # The testing Cluster names its nodes n1..nN: a cluster with a real `n1` is refused.
    with _nodes(admin, _node("n1")) as (theirs,):
        session = testing.Cluster(nodes=1, kubeconfig=cluster.kubeconfig, timeout=30)
        with pytest.raises(testing.ClusterError, match=r"already has Node.* n1"):
            session.start()
        after = _get(admin, "/api/v1/nodes/n1")
        assert after is not None, "the user's Node n1 is not deleted"
        assert after["metadata"]["uid"] == theirs["metadata"]["uid"]
        assert after["metadata"]["labels"] == {"made-by": "someone-else"}, "not adopted"
        lease = _get(admin, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1")
        assert lease is None, "no Lease kept for a Node that is not ours"


def test_a_node_with_a_creator_adopts_only_its_own_node(
    cluster: ApiUnderTest, admin: KubeConnection
) -> None:
    foreign, own = f"{cluster.node_name}-a", f"{cluster.node_name}-b"
    token = f"testing-{secrets.token_hex(4)}"
    mine = {ANNOTATION_CREATOR: token}
    log: Any = logging.getLogger("test")
    with _nodes(admin, _node(foreign), _node(own, mine)):
        for name, adopts in ((foreign, False), (own, True)):
            settings = NodeSettings(node_name=name, creator=token)
            registrar = Registrar(
                settings, NodeApi(admin.api), detect_host(), lambda n=name: _node(n), log
            )
            if adopts:
                registered = registrar.try_register()
                assert registered["metadata"]["labels"][LABEL_VIRTUAL] == "true"
                assert registrar.uid == registered["metadata"]["uid"]
            else:
                with pytest.raises(NotOurNode, match=f"Node named {name} exists"):
                    registrar.try_register()
        untouched = _get(admin, f"/api/v1/nodes/{foreign}")
        assert untouched is not None
        assert untouched["metadata"]["labels"] == {"made-by": "someone-else"}


def test_only_nodes_the_session_created_are_deleted_each_by_its_uid(
    cluster: ApiUnderTest, admin: KubeConnection
) -> None:
    token = f"testing-{secrets.token_hex(4)}"
    ours, other_session, plain = (f"{cluster.node_name}-{x}" for x in "abc")
    bodies = (
        _node(ours, {ANNOTATION_CREATOR: token}),
        _node(other_session, {ANNOTATION_CREATOR: "testing-other"}),
        _node(plain),
    )
    with _nodes(admin, *bodies):
        assert joined.delete_created_nodes(admin, [ours, other_session, plain], token) == [ours]
        # A delete of a Node by name only (the old close()) would have taken the two others.
        assert _get(admin, f"/api/v1/nodes/{ours}") is None or _deleting(admin, ours)
        assert _get(admin, f"/api/v1/nodes/{other_session}") is not None
        assert _get(admin, f"/api/v1/nodes/{plain}") is not None


def _deleting(admin: KubeConnection, name: str) -> bool:
    node = _get(admin, f"/api/v1/nodes/{name}")
    return node is not None and bool(node["metadata"].get("deletionTimestamp"))


def test_the_session_removes_only_a_cluster_role_binding_it_created(
    cluster: ApiUnderTest, admin: KubeConnection
) -> None:
    name = f"kubelet-sim-test-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:node-proxier",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "x"}],
    }
    path = f"{joined.BINDINGS}/{name}"
    uid = joined.create_binding(admin, body)
    try:
        assert uid is not None
        assert joined.create_binding(admin, body) is None, "one that exists is not ours"
        joined.delete_binding(admin, name, "not-its-uid")
        assert _get(admin, path) is not None, "a binding of another UID stays"
        joined.delete_binding(admin, name, uid)
        assert _get(admin, path) is None
    finally:
        with contextlib.suppress(ApiError):
            request_json(admin.api, "DELETE", path)
