"""Service accounts as a real cluster has them: per-namespace defaults, tokens, admission."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.cluster import ApiUnderTest, pod_body, wait_for


def _exists(read: object) -> bool:
    try:
        read()  # type: ignore[operator]
    except ApiException:
        return False
    return True


def test_every_namespace_gets_default_account_and_root_ca(cluster: ApiUnderTest) -> None:
    cluster.require_namespace_defaults()
    ns = cluster.namespace
    wait_for(
        lambda: _exists(lambda: cluster.core.read_namespaced_service_account("default", ns)),
        10,
        "default SA",
    )
    wait_for(
        lambda: _exists(lambda: cluster.core.read_namespaced_config_map("kube-root-ca.crt", ns)),
        10,
        "root CA",
    )
    ca = cluster.core.read_namespaced_config_map("kube-root-ca.crt", ns)
    assert "BEGIN CERTIFICATE" in ca.data["ca.crt"]


def test_token_request_for_a_pod(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": ["test"], "expirationSeconds": 3600},
    }
    answer = cluster.core.create_namespaced_service_account_token("default", ns, body)
    token = answer.status.token
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == f"system:serviceaccount:{ns}:default"
    assert claims["aud"] == ["test"]
    assert answer.status.expiration_timestamp is not None
    with pytest.raises(ApiException) as missing:
        cluster.core.create_namespaced_service_account_token("nobody", ns, body)
    assert missing.value.status == 404


def test_pod_with_a_missing_service_account_is_forbidden(cluster: ApiUnderTest) -> None:
    cluster.require_service_account_admission()  # what refuses it
    with pytest.raises(ApiException) as refused:
        cluster.core.create_namespaced_pod(
            cluster.namespace, pod_body("p", serviceAccountName="ghost")
        )
    assert refused.value.status == 403
    assert 'serviceaccount "ghost" not found' in json.loads(refused.value.body)["message"]
