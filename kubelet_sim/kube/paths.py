"""List-watch calls by path, in place of the client's generated API classes.

Importing `client.CoreV1Api` loads a pydantic model for every type its methods name: some 250
modules and 22 MiB of a node's memory, for methods the agent only ever calls with
`_preload_content=False`, reading the JSON itself. So a `Collection` builds the same request
with the ApiClient's own serializer (its host, auth and headers) and answers as a generated
`list_*` method does there: the raw response, an `ApiException` for a status outside 2xx.
Single-object calls go through `rest.request_json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubelet_sim.kube.rest import serialize

QUERY_NAMES = {  # the generated methods' keyword arguments, as the API spells them
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "resource_version": "resourceVersion",
    "resource_version_match": "resourceVersionMatch",
    "timeout_seconds": "timeoutSeconds",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "send_initial_events": "sendInitialEvents",
    "_continue": "continue",
    "limit": "limit",
    "watch": "watch",
}


@dataclass(frozen=True)
class Collection:
    """One collection's list and watch, e.g. `/api/v1/namespaces/{}/secrets` (positional
    arguments fill the braces); called as the generated `list_*` method is."""

    api: client.ApiClient
    path: str

    def __call__(
        self,
        *args: str,
        _preload_content: bool = False,
        _request_timeout: Any = None,
        **params: Any,
    ) -> urllib3.BaseHTTPResponse:
        unknown = set(params) - set(QUERY_NAMES)
        if unknown:
            raise TypeError(f"{self.path}: unknown list parameters {sorted(unknown)}")
        query = [(QUERY_NAMES[k], v) for k, v in params.items() if v is not None]
        request = serialize(self.api, "GET", self.path.format(*args), query=query)
        method, url, headers, body, post_params = request
        answer = self.api.call_api(
            method, url, headers, body, post_params, _request_timeout=_request_timeout
        )
        response: urllib3.BaseHTTPResponse = answer.response
        if not 200 <= answer.status <= 299:
            answer.read()
            response.release_conn()
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        if _preload_content:
            answer.read()
            response.release_conn()  # fully read: the connection goes back to the pool
        return response


# The collections the agent lists and watches ("{}": the namespace, a positional argument).
PODS = "/api/v1/pods"
PODS_IN = "/api/v1/namespaces/{}/pods"
NODES = "/api/v1/nodes"
SERVICES = "/api/v1/services"
EVENTS = "/api/v1/events"
EVENTS_IN = "/api/v1/namespaces/{}/events"
CONFIG_MAPS_IN = "/api/v1/namespaces/{}/configmaps"
SECRETS_IN = "/api/v1/namespaces/{}/secrets"
ENDPOINT_SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
