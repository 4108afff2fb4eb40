"""Kubeconfigs for a test cluster's nodes: a user's copied and pointed at a node's relay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from kubelet_sim.formats.pem import write_private

_FILE_FIELDS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}


def api_server(kubeconfig: Path, context: str | None = None) -> tuple[str, int]:
    """The (host, port) of the API server that the kubeconfig's context names."""
    config = _load(kubeconfig)
    url = urlparse(str(_cluster(config, context)["server"]))
    if url.hostname is None:
        raise ValueError(f"{kubeconfig}: no server address in it")
    return url.hostname, url.port or 443


def through_relay(source: Path, target: Path, port: int, context: str | None = None) -> Path:
    """`source` written to `target` (mode 0600) with its context's cluster at the relay on
    127.0.0.1:`port`: TLS passes the relay untouched, so the client still checks the
    server's certificate for the name it had (`tls-server-name`). Relative file paths in it
    are made absolute (they were relative to `source`'s directory)."""
    config = _load(source)
    for section, (key, fields) in _FILE_FIELDS.items():
        for entry in config.get(section) or []:
            body = entry.get(key) or {}
            for name in fields:
                if body.get(name) and not Path(body[name]).is_absolute():
                    body[name] = str((source.parent / body[name]).resolve())
    cluster = _cluster(config, context)
    host = urlparse(str(cluster["server"])).hostname or ""
    cluster["server"] = f"https://127.0.0.1:{port}"
    if host not in ("127.0.0.1", "localhost") and not cluster.get("insecure-skip-tls-verify"):
        cluster.setdefault("tls-server-name", host)
    if context:
        config["current-context"] = context
    return write_private(target, json.dumps(config, indent=2).encode())


def _load(path: Path) -> dict[str, Any]:
    config = yaml.safe_load(path.read_text())
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not a kubeconfig")
    return config


def _cluster(config: dict[str, Any], context: str | None) -> dict[str, Any]:
    name = context or config.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    if name not in contexts:
        raise ValueError(f"no context {name!r} in the kubeconfig")
    wanted = contexts[name].get("cluster")
    for entry in config.get("clusters") or []:
        if entry.get("name") == wanted:
            cluster: dict[str, Any] = entry.setdefault("cluster", {})
            return cluster
    raise ValueError(f"context {name!r} names no cluster {wanted!r} in the kubeconfig")
