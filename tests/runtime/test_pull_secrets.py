"""Registry credentials picked from imagePullSecrets for an image's registry."""

from __future__ import annotations

import base64
import json

from kubelet_sim.pod.pull_secrets import auths_for, registry_of


def _secret(auths: dict[str, dict[str, str]]) -> dict[str, object]:
    raw = base64.b64encode(json.dumps({"auths": auths}).encode()).decode()
    return {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": raw}}


def test_registry_of_image() -> None:
    assert registry_of("busybox") == "docker.io"
    assert registry_of("library/busybox:1") == "docker.io"
    assert registry_of("localhost:5000/a") == "localhost:5000"
    assert registry_of("ghcr.io/org/img:tag") == "ghcr.io"


def test_matching_credentials_only() -> None:
    secrets = [
        _secret({"https://index.docker.io/v1/": {"username": "hub", "password": "p1"}}),
        _secret({"ghcr.io": {"username": "gh", "password": "p2"}}),
    ]
    [hub] = auths_for("busybox:1", secrets)
    assert (hub.username, hub.password) == ("hub", "p1")
    [gh] = auths_for("ghcr.io/org/img:1", secrets)
    assert gh.username == "gh"
    assert auths_for("quay.io/x/y:1", secrets) == []
    assert "p1" not in repr(hub), "passwords never show in logs"
