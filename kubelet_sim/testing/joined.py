"""What a test session may touch in a cluster it joined: only what it made itself.

A user's cluster may already have a Node named like ours (a real `n1`): the session refuses to
start, naming it, rather than adopting it (its labels, status, Lease and pods) and deleting it
at the end. Its own Nodes carry the session's creator token (`NodeSettings.creator`), and only
a Node that still carries it is deleted, with a UID precondition, so that one deleted and made
again by someone else meanwhile stays. The ClusterRoleBinding the nodes need is removed only
if this session created it.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.rest import ApiError, delete_options, read_json, request_json
from kubelet_sim.node.node_object import created_by

BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"


class NameTaken(RuntimeError):
    """Nodes of our names exist in the joined cluster; the message names them."""


def refuse_taken_names(admin: KubeConnection, names: Iterable[str]) -> None:
    """`NameTaken` if any of `names` is a Node already: never adopt what we did not make."""
    taken = [name for name in names if read_json(admin.api, f"/api/v1/nodes/{name}") is not None]
    if taken:
        raise NameTaken(
            f"the joined cluster already has Node(s) {', '.join(taken)}: kubelet-sim's test"
            " nodes would take them over, so the session does not start. Remove them if they"
            f" are left from an earlier session (kubectl delete node {' '.join(taken)}), or"
            " join a cluster without them"
        )


def delete_created_nodes(admin: KubeConnection, names: Iterable[str], creator: str) -> list[str]:
    """Delete those of `names` whose Node carries `creator`, each by its UID; the deleted."""
    deleted = []
    for name in names:
        node = read_json(admin.api, f"/api/v1/nodes/{name}")
        if node is None or not created_by(node, creator):
            continue
        if _delete(admin, f"/api/v1/nodes/{name}", node["metadata"]["uid"]):
            deleted.append(name)
    return deleted


def create_binding(admin: KubeConnection, body: Json) -> str | None:
    """Create the ClusterRoleBinding `body`; its UID, or None where one of its name exists
    (then it is the cluster's, and stays)."""
    try:
        made = request_json(admin.api, "POST", BINDINGS, body)
    except ApiError as exc:
        if exc.already_exists:
            return None
        raise
    return str(made["metadata"]["uid"])


def delete_binding(admin: KubeConnection, name: str, uid: str) -> None:
    """The ClusterRoleBinding this session created (by its UID)."""
    _delete(admin, f"{BINDINGS}/{name}", uid)


def _delete(admin: KubeConnection, path: str, uid: str) -> bool:
    """Whether it was deleted: not where it is gone, or made again by someone else (409)."""
    try:
        request_json(admin.api, "DELETE", path, delete_options(uid))
    except ApiError as exc:
        if exc.not_found or exc.conflict:
            return False
        raise
    return True
