"""Service account tokens for projected volumes, from the TokenRequest API, as the kubelet's
token manager gets them: bound to the pod, cached, renewed at 80 % of their lifetime."""

from __future__ import annotations

import threading
import time
from datetime import datetime

from kubernetes import client

from kubelet_sim.kube.rest import request_json


class TokenManager:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._cache: dict[tuple[str, ...], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def token(
        self,
        namespace: str,
        service_account: str,
        expiration_seconds: int,
        audiences: list[str],
        pod_name: str,
        pod_uid: str,
    ) -> str:
        key = (namespace, service_account, str(expiration_seconds), *audiences, pod_uid)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and time.time() < cached[1]:
            return cached[0]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": audiences or None,
                "expirationSeconds": expiration_seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": pod_uid,
                },
            },
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        answer = request_json(self._api, "POST", path, body)
        token = str(answer["status"]["token"])
        expires = datetime.fromisoformat(answer["status"]["expirationTimestamp"]).timestamp()
        issued = time.time()
        refresh_at = issued + 0.8 * max(0.0, expires - issued)
        with self._lock:
            self._cache[key] = (token, refresh_at)
        return token

    def forget_pod(self, pod_uid: str) -> None:
        with self._lock:
            for key in [k for k in self._cache if k[-1] == pod_uid]:
                del self._cache[key]
