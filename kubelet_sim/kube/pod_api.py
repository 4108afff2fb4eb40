"""Pod writes of a node agent: status (the kubelet's status manager) and the final delete."""

from __future__ import annotations

import threading

from kubernetes import client

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.smp import POD_STATUS_SCHEMA, two_way_patch
from kubelet_sim.kube.rest import delete_options, request_json, resource_version
from kubelet_sim.kube.schema import POD_STATUS, ServerSchema

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class PodStatusWriter:
    """One writer of pod status with a versioned cache, as the kubelet's status manager.

    The base of each patch is the newest status we know the API holds: the pod the informer
    delivered, or the answer to our own last write if that is newer. An unchanged status is
    never written; the patch carries `metadata.uid` so a replaced pod is never written to.
    Fields the server does not know are left out, since it would drop them.
    """

    def __init__(self, api: client.ApiClient, schema: ServerSchema | None = None) -> None:
        self._api = api
        self._schema = schema or ServerSchema()
        self._written: dict[str, tuple[int, Json]] = {}
        self._lock = threading.Lock()
        self.writes = 0
        self.unchanged = 0  # syncs whose status matched what the server holds: nothing sent

    def base(self, pod: Json) -> Json:
        uid = pod["metadata"]["uid"]
        with self._lock:
            written = self._written.get(uid)
        if written is not None and written[0] > resource_version(pod):
            return written[1]
        status: Json = pod.get("status") or {}
        return status

    def write(self, pod: Json, status: Json) -> Json | None:
        """PATCH pods/status if `status` differs; returns the updated pod, or None if unchanged.

        Raises ApiError: 404 (pod gone), `uid_changed` (a new pod of that name).
        """
        meta = pod["metadata"]
        status = self._schema.prune(status, POD_STATUS)
        patch = two_way_patch(self.base(pod), status, POD_STATUS_SCHEMA)
        if not patch:
            with self._lock:
                self.unchanged += 1
            return None
        body = {"metadata": {"uid": meta["uid"]}, "status": patch}
        updated = request_json(
            self._api,
            "PATCH",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            body,
            content_type=STRATEGIC_MERGE_PATCH,
        )
        with self._lock:
            self._written[meta["uid"]] = (resource_version(updated), updated.get("status") or {})
            self.writes += 1
        return updated

    def has_written(self, uid: str) -> bool:
        with self._lock:
            return uid in self._written

    def forget(self, uid: str) -> None:
        with self._lock:
            self._written.pop(uid, None)


class MirrorPodApi:
    """A node's writes of its mirror pods (the kubelet's mirror client): NodeRestriction lets a
    node create a pod only as a mirror pod bound to itself and owned by its Node."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = api

    def create(self, pod: Json) -> Json:
        """POST the mirror pod; the created pod. ApiError `already_exists` when one of that
        name is there."""
        namespace = pod["metadata"]["namespace"]
        return request_json(self._api, "POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    def delete(self, namespace: str, name: str, uid: str) -> None:
        """DeleteMirrorPod: grace 0, with the mirror's UID as precondition."""
        delete_pod_finally(self._api, namespace, name, uid)


def delete_pod_finally(api: client.ApiClient, namespace: str, name: str, uid: str) -> None:
    """The kubelet's last word on a deleted pod: DELETE with grace 0 and a uid precondition.

    Without it a gracefully deleted pod would stay Terminating forever.
    """
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    request_json(api, "DELETE", path, delete_options(uid, grace=0))
