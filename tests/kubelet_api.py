"""A node serving the kubelet API for a test: client certificates, the agent, the API server's
way to it (the real one's kubelet-client certificate; the fake is given the same identity)."""

from __future__ import annotations

import contextlib
import ssl
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kubelet_sim.controlplane.pki import CertificateAuthority
from kubelet_sim.server.settings import ConnectionLimits, ServerSettings
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest
from tests.docker_env import DockerEnv

COUNT = ["sh", "-c", "i=0; while :; do i=$((i+1)); echo line $i; sleep 0.2; done"]


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


def stranger_certificate(tls: Path, user: str) -> Path:
    """<tls>/stranger.crt/.key for `user` in system:masters, signed by a CA no node trusts."""
    other = CertificateAuthority(tls / "other-ca", "other-ca")
    return other.issue("stranger", user, groups=("system:masters",), directory=tls).cert


@contextlib.contextmanager
def serving_node(
    cluster: ApiUnderTest,
    docker_env: DockerEnv,
    tmp_path: Path,
    limits: ConnectionLimits | None = None,
) -> Iterator[Node]:
    """An agent serving the kubelet API on a free loopback port, trusting the control plane's
    client CA when this session started one (else a CA of the test's own)."""
    tls = tmp_path / "tls"
    settings = ServerSettings(
        address="127.0.0.1",
        port=0,
        client_ca_file=str(client_certificates(cluster, tls)),
        limits=limits or ConnectionLimits(),
    )
    running = start_agent(cluster, docker_env, tmp_path / "root", server=settings)
    server = running.agent.server
    assert server is not None
    with api_server_as_kubelet_client(cluster, tls):
        try:
            yield Node(running, server.port, tls)
        finally:
            if running.thread.is_alive():
                running.stop()


def client_certificates(cluster: ApiUnderTest, tls: Path) -> Path:
    """In `tls`: admin.crt/key (the API server's kubelet-client identity), stranger.crt/key
    (the same names from another CA); returns the client CA file the node should trust: the
    test's CA and what lets the API server in (`_Session.kubelet_client_trust`; a test that
    needs it is marked `through_api_server`)."""
    trust = cluster.session.kubelet_client_trust()
    tls.mkdir()
    env = cluster.session.env
    ca = env.ca if env is not None else CertificateAuthority(tls / "client-ca", "client-ca")
    who = "kube-apiserver-kubelet-client"
    ca.issue("admin", who, groups=("system:masters",), directory=tls)
    stranger_certificate(tls, who)
    if trust is None:
        return ca.pair.cert
    client_ca = tls / "client-ca-bundle.crt"
    client_ca.write_bytes(ca.pair.cert.read_bytes() + Path(trust).read_bytes())
    return client_ca


@contextlib.contextmanager
def api_server_as_kubelet_client(cluster: ApiUnderTest, tls: Path) -> Iterator[None]:
    """The fake API server reaches nodes as kube-apiserver --kubelet-client-certificate does,
    with the admin certificate of `client_certificates` (the real one has its own)."""
    fake = cluster.session.fake
    if fake is not None:
        fake.kubelet_client = (str(tls / "admin.crt"), str(tls / "admin.key"))
    try:
        yield
    finally:
        if fake is not None:
            fake.kubelet_client = None


@pytest.fixture
def node(cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path) -> Iterator[Node]:
    with serving_node(cluster, docker_env, tmp_path) as serving:
        yield serving


def sa_token(cluster: ApiUnderTest, name: str) -> str:
    """A token of a new service account `name` in the test's namespace (10 minutes)."""
    cluster.core.create_namespaced_service_account(cluster.namespace, {"metadata": {"name": name}})
    return str(
        cluster.core.create_namespaced_service_account_token(
            name, cluster.namespace, {"spec": {"expirationSeconds": 600}}
        ).status.token
    )


@pytest.fixture
def admin_token(cluster: ApiUnderTest) -> Iterator[str]:
    """A bearer token the API server vouches for, allowed every kubelet API path: the fake's
    admin token (system:masters); on a real server a service account bound to the built-in
    system:kubelet-api-admin role, as one would bind a monitoring agent."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    tokens = [u["user"]["token"] for u in config.get("users") or () if u["user"].get("token")]
    if cluster.is_fake and tokens:
        yield tokens[0]
        return
    token = sa_token(cluster, "api-admin")
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    name = f"kubelet-api-admin-{uuid.uuid4().hex[:8]}"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:kubelet-api-admin",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "api-admin", "namespace": cluster.namespace}
            ],
        }
    )
    try:
        yield token
    finally:
        with contextlib.suppress(client.ApiException):
            rbac.delete_cluster_role_binding(name)
