"""The few Node and Lease calls the node lifecycle needs, as plain dicts.

Reads, deletes and patches go through the generated client methods. Creates and updates send
the dict as it is: the generated methods of kubernetes 37 first validate a dict body into the
client's pydantic model, which refuses fields the model does not know (a newer server's) and
re-formats MicroTime values (`renewTime`) in a way the server can refuse.
"""

from __future__ import annotations

from kubernetes import client

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.smp import node_status_patch
from kubelet_sim.kube.rest import REQUEST_TIMEOUT, delete_options, read_json, request_json
from kubelet_sim.kube.schema import NODE_STATUS, ServerSchema

LEASE_API = "/apis/coordination.k8s.io/v1"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class NodeApi:
    """Node and Lease reads and writes for one node agent; errors come as `ApiError`."""

    def __init__(
        self,
        api: client.ApiClient,
        schema: ServerSchema | None = None,
        timeout: tuple[float, float] = REQUEST_TIMEOUT,
    ) -> None:
        self._api = api
        self._schema = schema or ServerSchema()
        self._timeout = timeout  # (connect, read) seconds of every call

    def get_node(self, name: str) -> Json | None:
        return read_json(self._api, f"/api/v1/nodes/{name}", timeout=self._timeout)

    def create_node(self, body: Json) -> Json:
        return request_json(self._api, "POST", "/api/v1/nodes", body, timeout=self._timeout)

    def update_node(self, body: Json) -> Json:
        """PUT the whole Node; `metadata.resourceVersion` makes a stale write fail with 409."""
        name = body["metadata"]["name"]
        return request_json(self._api, "PUT", f"/api/v1/nodes/{name}", body, timeout=self._timeout)

    def patch_node_status(self, name: str, original: Json, status: Json) -> Json:
        """PATCH nodes/status from the status the server holds to ours, as the kubelet does.

        Fields the server does not know are left out of both, as it would drop them.
        """
        patch = node_status_patch(
            self._schema.prune(original, NODE_STATUS), self._schema.prune(status, NODE_STATUS)
        )
        return request_json(
            self._api,
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": patch},
            content_type=STRATEGIC_MERGE_PATCH,
            timeout=self._timeout,
        )

    def delete_node(self, name: str, uid: str) -> None:
        """Only the Node of that UID: one made again under the name by someone else stays."""
        request_json(
            self._api, "DELETE", f"/api/v1/nodes/{name}", delete_options(uid), timeout=self._timeout
        )

    def get_lease(self, namespace: str, name: str) -> Json | None:
        path = f"{LEASE_API}/namespaces/{namespace}/leases/{name}"
        return read_json(self._api, path, timeout=self._timeout)

    def create_lease(self, body: Json) -> Json:
        namespace = body["metadata"]["namespace"]
        path = f"{LEASE_API}/namespaces/{namespace}/leases"
        return request_json(self._api, "POST", path, body, timeout=self._timeout)

    def update_lease(self, body: Json) -> Json:
        meta = body["metadata"]
        path = f"{LEASE_API}/namespaces/{meta['namespace']}/leases/{meta['name']}"
        return request_json(self._api, "PUT", path, body, timeout=self._timeout)
