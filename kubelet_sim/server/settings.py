"""How the kubelet API server listens and whom it lets in (the kubelet's flags of these names)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerSettings:
    address: str = "0.0.0.0"  # the kubelet's default: the API server must reach it
    port: int = 10250  # 0: any free port, advertised in the Node's daemonEndpoints
    tls_cert_file: Path | None = None  # with tls_private_key_file; else one is made at start
    tls_private_key_file: Path | None = None
    client_ca_file: str | None = None  # None: the cluster CA of the kubeconfig
    anonymous_auth: bool = False
