"""A node serving the kubelet API for a test: client certificates, the agent, the API server's
way to it (the real one's kubelet-client certificate; the fake is given the same identity)."""

from __future__ import annotations

import base64
import contextlib
import datetime
import ssl
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubelet_sim.server.settings import ConnectionLimits, ServerSettings
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import Cluster
from tests.docker_env import DockerEnv

COUNT = ["sh", "-c", "i=0; while :; do i=$((i+1)); echo line $i; sleep 0.2; done"]


@dataclass
class Ca:
    cert: Path
    key: Path


@dataclass
class Node:
    agent: RunningAgent
    port: int
    tls: Path  # a directory of client certificates

    def get(self, path: str, cert: str | None = "admin", token: str | None = None) -> Any:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the node's serving certificate is self-signed
        if cert is not None:
            context.load_cert_chain(self.tls / f"{cert}.crt", self.tls / f"{cert}.key")
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        return urllib.request.urlopen(request, context=context, timeout=30)

    def text(self, path: str) -> str:
        with self.get(path) as response:
            return str(response.read().decode())


def _key_and_name(cn: str, org: str | None) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return ec.generate_private_key(ec.SECP256R1()), x509.Name(attrs)


def _write(path: Path, key: Any, cert: x509.Certificate) -> None:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _new_ca(directory: Path, name: str) -> Ca:
    key, subject = _key_and_name(name, None)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write(directory / name, key, cert)
    return Ca(directory / f"{name}.crt", directory / f"{name}.key")


def _client_cert(ca: Ca, path: Path, cn: str, org: str | None) -> None:
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key, subject = _key_and_name(cn, org)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    _write(path, key, cert)


def _cluster_ca(kubeconfig: str) -> bytes:
    """The CA of the kubeconfig's current cluster, as PEM."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    context = next(
        c["context"] for c in config["contexts"] if c["name"] == config["current-context"]
    )
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    if cluster.get("certificate-authority-data"):
        return base64.b64decode(cluster["certificate-authority-data"])
    return Path(cluster["certificate-authority"]).read_bytes()


@contextlib.contextmanager
def serving_node(
    cluster: Cluster, docker_env: DockerEnv, tmp_path: Path, limits: ConnectionLimits | None = None
) -> Iterator[Node]:
    """An agent serving the kubelet API on a free loopback port, trusting the control plane's
    client CA when this session started one (else a CA of the test's own)."""
    tls = tmp_path / "tls"
    tls.mkdir()
    env = cluster.session.env
    ca = Ca(*env.client_ca) if env is not None else _new_ca(tls, "client-ca")
    who = ("kube-apiserver-kubelet-client", "system:masters")
    _client_cert(ca, tls / "admin", *who)
    _client_cert(_new_ca(tls, "other-ca"), tls / "stranger", *who)
    client_ca = ca.cert
    if env is None and cluster.session.fake is None:
        # A cluster of the user's (kind): its API server shows a kubelet-client certificate
        # signed by the cluster CA, which the agent trusts by default; trust the test's too.
        client_ca = tls / "client-ca-bundle.crt"
        client_ca.write_bytes(ca.cert.read_bytes() + _cluster_ca(cluster.kubeconfig))
    settings = ServerSettings(
        address="127.0.0.1",
        port=0,
        client_ca_file=str(client_ca),
        limits=limits or ConnectionLimits(),
    )
    running = start_agent(cluster, docker_env, tmp_path / "root", server=settings)
    server = running.agent.server
    assert server is not None
    fake = cluster.session.fake
    if fake is not None:  # kube-apiserver --kubelet-client-certificate, for the fake
        fake.kubelet_client = (str(tls / "admin.crt"), str(tls / "admin.key"))
    try:
        yield Node(running, server.port, tls)
    finally:
        if fake is not None:
            fake.kubelet_client = None
        if running.thread.is_alive():
            running.stop()


@pytest.fixture
def node(cluster: Cluster, docker_env: DockerEnv, tmp_path: Path) -> Iterator[Node]:
    with serving_node(cluster, docker_env, tmp_path) as serving:
        yield serving
