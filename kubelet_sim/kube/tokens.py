"""Service account tokens for projected volumes, from the TokenRequest API, as the kubelet's
token manager gets them: bound to the pod, cached, renewed at 80 % of their lifetime."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime

from kubernetes import client

from kubelet_sim.kube.rest import request_json


@dataclass(frozen=True)
class TokenRequest:
    """A projected volume's token for one pod: also what the manager caches it under."""

    namespace: str
    service_account: str
    expiration_seconds: int
    audiences: tuple[str, ...]
    pod_name: str
    pod_uid: str


class TokenManager:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._cache: dict[TokenRequest, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def token(self, request: TokenRequest) -> str:
        with self._lock:
            cached = self._cache.get(request)
        if cached is not None and time.time() < cached[1]:
            return cached[0]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": list(request.audiences) or None,
                "expirationSeconds": request.expiration_seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": request.pod_name,
                    "uid": request.pod_uid,
                },
            },
        }
        namespace, account = request.namespace, request.service_account
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        answer = request_json(self._api, "POST", path, body)
        token = str(answer["status"]["token"])
        expires = datetime.fromisoformat(answer["status"]["expirationTimestamp"]).timestamp()
        issued = time.time()
        refresh_at = issued + 0.8 * max(0.0, expires - issued)
        with self._lock:
            self._cache[request] = (token, refresh_at)
        return token

    def forget_pod(self, pod_uid: str) -> None:
        with self._lock:
            for key in [k for k in self._cache if k.pod_uid == pod_uid]:
                del self._cache[key]
