"""Who gets into the kubelet API, as the kubelet decides it: a client certificate is checked per
request (one from another CA is no credential, not a failed handshake), then a bearer token,
then anonymous; and what each path asks the authorizer (verb, nodes/<subresource>).

Every test runs on both API servers: on the real one the TokenReviews and SubjectAccessReviews
are its own answers (RBAC); on the fake a spy also shows the reviews it was sent.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ssl
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client

from kubelet_sim.controlplane.pki import CertificateAuthority
from kubelet_sim.kube.reviews import User
from kubelet_sim.server.certs import self_signed
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.server.tls import PeerCertificate, serving_tls
from kubelet_sim.server.x509auth import X509Authenticator
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest
from tests.docker_env import DockerEnv
from tests.kubelet_api import Node, admin_token, node, sa_token, stranger_certificate

__all__ = ["admin_token", "node"]  # the fixtures


def ask(
    port: int,
    method: str,
    path: str,
    *,
    cert: Path | None = None,
    token: str | None = None,
) -> tuple[int, str]:
    """One request over TLS with a client certificate (`cert`.crt/.key) and/or a token."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(cert.with_suffix(".crt"), cert.with_suffix(".key"))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        conn.request(method, path, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read().decode(errors="replace")
    finally:
        conn.close()


def test_a_certificate_from_another_ca_is_no_credential(
    cluster: ApiUnderTest, node: Node, admin_token: str
) -> None:
    """The handshake succeeds; the certificate authenticates no one, so a valid token decides
    (200), and without one the answer is 401, as from a kubelet."""
    stranger = node.tls / "stranger"
    assert ask(node.port, "GET", "/pods", cert=stranger) == (401, "Unauthorized\n")
    status, body = ask(node.port, "GET", "/pods", cert=stranger, token=admin_token)
    assert status == 200, body
    assert '"kind": "PodList"' in body
    assert ask(node.port, "GET", "/pods", cert=stranger, token="not-a-token")[0] == 401
    # the test's own CA still authenticates (kube-apiserver-kubelet-client, system:masters)
    assert ask(node.port, "GET", "/healthz", cert=node.tls / "admin") == (200, "ok")


def test_anonymous_never_follows_a_failed_credential(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """--anonymous-auth: no credential at all is system:anonymous (then authorized like
    anyone: 403 naming the user); a certificate that does not verify is an authentication
    error, and an error is 401, never anonymous (FailOnError)."""
    tls = tmp_path / "tls"
    tls.mkdir()
    stranger_certificate(tls, "someone")
    ca = CertificateAuthority(tls / "client-ca", "client-ca")
    settings = ServerSettings(
        address="127.0.0.1", port=0, anonymous_auth=True, client_ca_file=str(ca.pair.cert)
    )
    running = start_agent(cluster, docker_env, tmp_path / "root", server=settings)
    try:
        server = running.agent.server
        assert server is not None
        status, body = ask(server.port, "GET", "/pods")
        assert status == 403, body
        assert body.startswith("Forbidden (user=system:anonymous, verb=get, resource=nodes,")
        assert ask(server.port, "GET", "/pods", cert=tls / "stranger")[0] == 401
    finally:
        running.stop()


def test_anonymous_off_is_401(node: Node) -> None:
    assert ask(node.port, "GET", "/healthz") == (401, "Unauthorized\n")


# (method, path) → (verb, subresource), as nodeAuthorizerAttributesGetter maps them: every
# route this server has, the subresource paths and their edges, and every method
ROUTES = [
    ("GET", "/healthz", "get", "proxy"),
    ("HEAD", "/healthz", "", "proxy"),  # only GET/POST/PUT/PATCH/DELETE have a verb
    ("GET", "/pods", "get", "proxy"),
    ("GET", "/pods/", "get", "proxy"),
    ("GET", "/metrics", "get", "metrics"),
    ("GET", "/metrics/resource", "get", "metrics"),
    ("GET", "/metrics/cadvisor", "get", "metrics"),
    ("GET", "/metricsfoo", "get", "proxy"),  # isSubpath: the path or below it, not a prefix
    ("GET", "/stats", "get", "stats"),
    ("GET", "/stats/summary", "get", "stats"),
    ("POST", "/stats/container", "create", "stats"),
    ("GET", "/spec/", "get", "spec"),
    ("GET", "/logs/", "get", "log"),
    ("GET", "/logs/syslog", "get", "log"),
    ("GET", "/containerLogs/ns/p/c", "get", "proxy"),
    ("GET", "/exec/ns/p/c", "get", "proxy"),
    ("POST", "/exec/ns/p/c", "create", "proxy"),
    ("POST", "/exec/ns/p/uid/c", "create", "proxy"),
    ("POST", "/attach/ns/p/c", "create", "proxy"),
    ("POST", "/portForward/ns/p", "create", "proxy"),
    ("POST", "/run/ns/p/c", "create", "proxy"),
    ("POST", "/run/ns/p/uid/c", "create", "proxy"),
    ("GET", "/configz", "get", "proxy"),
    ("GET", "/runningpods/", "get", "proxy"),
    ("PUT", "/pods", "update", "proxy"),
    ("PATCH", "/pods", "patch", "proxy"),
    ("DELETE", "/pods", "delete", "proxy"),
    ("OPTIONS", "/pods", "", "proxy"),
    ("GET", "/", "get", "proxy"),
]


def test_every_route_asks_for_its_own_attributes(cluster: ApiUnderTest, node: Node) -> None:
    """A service account the authorizer allows nothing: each request's 403 names the verb and
    subresource the kubelet asked about (the real server's answer on the real pass); the fake's
    spy shows each SubjectAccessReview as sent (nodes/<sub> of this node, core v1)."""
    token = sa_token(cluster, "nobody")
    user = f"system:serviceaccount:{cluster.namespace}:nobody"
    fake = cluster.fake
    seen_before = len(fake.access_reviews) if fake is not None else 0
    for method, path, verb, subresource in ROUTES:
        status, body = ask(node.port, method, path, token=token)
        assert status == 403, (method, path, status, body)
        if method != "HEAD":  # a HEAD answer has no body
            assert body == (
                f"Forbidden (user={user}, verb={verb}, resource=nodes, subresource={subresource})\n"
            ), (method, path)
    if fake is None:
        return
    sent = [
        spec["resourceAttributes"]
        for spec in fake.access_reviews[seen_before:]
        if spec.get("user") == user
    ]
    expected = {(verb, sub) for _m, _p, verb, sub in ROUTES}
    assert {(a["verb"], a["subresource"]) for a in sent} == expected
    for attrs in sent:
        assert attrs["resource"] == "nodes"
        assert attrs["name"] == cluster.node_name
        assert (attrs["group"], attrs["version"]) == ("", "v1")


def test_a_certificate_that_does_not_verify_is_logged_not_a_handshake_error(node: Node) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        assert ask(node.port, "GET", "/pods", cert=node.tls / "stranger")[0] == 401
    events = [e["event"] for e in logs]
    assert "TLS handshake error" not in events
    (said,) = [e for e in logs if e["event"] == "client certificate not accepted"]
    assert "signed by unknown authority" in said["error"]


def _issue(
    subject: str,
    issuer: tuple[Any, x509.Name] | None,
    *,
    ca: bool = False,
    usages: list[x509.ObjectIdentifier] | None = None,
    days: int = 1,
    org: str | None = "system:masters",
) -> tuple[Any, x509.Name, x509.Certificate]:
    """The authenticator's cases, certificates CertificateAuthority never issues: no usages,
    expired, no CN, an intermediate CA, a leaf posing as an issuer."""
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, subject)] if subject else []
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    name = x509.Name(attrs or [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "o")])
    signer, issuer_name = issuer or (key, name)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=2))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), False)
    return key, name, builder.sign(signer, hashes.SHA256())


def _der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def test_the_x509_authenticator_checks_what_gos_checks(tmp_path: Path) -> None:
    """Chain to the client CA (through intermediates the client sent), validity, client-auth
    usage when usages are named; CN the user, O the groups; no CN: nobody, and no error. The
    chain limits cryptography's verifier adds are tests/server/test_client_certificates.py's."""
    root_key, root_name, root = _issue("root", None, ca=True)
    (tmp_path / "ca.crt").write_bytes(root.public_bytes(serialization.Encoding.PEM))
    authenticator = X509Authenticator.from_pem((tmp_path / "ca.crt").read_bytes())

    _k, _n, good = _issue("alice", (root_key, root_name))
    assert authenticator.verify(_der(good)) == PeerCertificate(
        User("alice", ("system:masters", "system:authenticated"))
    )
    _k, _n, client = _issue("bob", (root_key, root_name), usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
    assert authenticator.verify(_der(client)).user is not None
    _k, _n, any_usage = _issue(
        "dan", (root_key, root_name), usages=[ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE]
    )
    assert authenticator.verify(_der(any_usage)).user is not None, "as Go's x509 takes it"

    def error(cert: x509.Certificate, *intermediates: x509.Certificate) -> str:
        found = authenticator.verify(_der(cert), [_der(c) for c in intermediates])
        assert found.user is None
        return found.error

    _k, _n, expired = _issue("old", (root_key, root_name), days=-1)
    assert "expired" in error(expired)
    _k, _n, server = _issue("srv", (root_key, root_name), usages=[ExtendedKeyUsageOID.SERVER_AUTH])
    assert "incompatible key usage" in error(server)
    other_key, other_name, _other = _issue("other", None, ca=True)
    _k, _n, stranger = _issue("eve", (other_key, other_name))
    assert "unknown authority" in error(stranger)
    assert error(_issue("", (root_key, root_name))[2]) == "", "no CN: no user, no error"

    mid_key, mid_name, mid = _issue("intermediate", (root_key, root_name), ca=True)
    _k, _n, leaf = _issue("carol", (mid_key, mid_name), org=None)
    assert "unknown authority" in error(leaf), "without the intermediate"
    assert authenticator.verify(_der(leaf), [_der(mid)]).user == User(
        "carol", ("system:authenticated",)
    )
    _k, _n, not_ca = _issue("notca", (root_key, root_name))
    _k, _n, below = _issue("mallory", (_k, _n))
    assert "CA certificate has no basicConstraints" in error(below, not_ca), "a CA only"


def test_this_python_defers_the_certificate_check(tmp_path: Path) -> None:
    """The ctypes path is taken here (CPython with a shared libssl): no handshake check."""
    _key, _name, root = _issue("root", None, ca=True)
    (tmp_path / "ca.crt").write_bytes(root.public_bytes(serialization.Encoding.PEM))
    cert, key = self_signed(tmp_path / "pki", "n1", ["localhost"], ["127.0.0.1"])
    assert not serving_tls(cert, key, str(tmp_path / "ca.crt")).verified_in_handshake


def test_a_role_on_one_subresource_opens_only_its_paths(cluster: ApiUnderTest, node: Node) -> None:
    """RBAC decides on the attributes: `get` on nodes/stats opens /stats/summary and nothing
    else (the real server's authorizer; the fake keeps no Roles, so it is skipped there)."""
    if cluster.is_fake:
        pytest.skip("the fake API server keeps no Roles: RBAC is the real server's")
    token = sa_token(cluster, "stats-reader")
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    name = f"stats-reader-{uuid.uuid4().hex[:8]}"
    rule = {"apiGroups": [""], "resources": ["nodes/stats"], "verbs": ["get"]}
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [rule]})
    subject = {"kind": "ServiceAccount", "name": "stats-reader", "namespace": cluster.namespace}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    rbac.create_cluster_role_binding(
        {"metadata": {"name": name}, "roleRef": role_ref, "subjects": [subject]}
    )
    try:
        status, body = ask(node.port, "GET", "/stats/summary", token=token)
        assert status == 200, body
        assert ask(node.port, "GET", "/metrics", token=token)[0] == 403
        assert ask(node.port, "GET", "/pods", token=token)[0] == 403
        assert ask(node.port, "POST", "/stats/summary", token=token)[0] == 403, "get only"
    finally:
        with contextlib.suppress(client.ApiException):
            rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(client.ApiException):
            rbac.delete_cluster_role(name)


def test_a_self_signed_pair_is_kept_while_it_names_the_same_names(tmp_path: Path) -> None:
    """A restart of a thousand nodes signs nothing again; a changed name or IP gets a new pair."""
    first = self_signed(tmp_path / "pki", "n1", ["n1", "localhost"], ["127.0.0.1"])
    pem = first[0].read_bytes()
    again = self_signed(tmp_path / "pki", "n1", ["localhost", "n1"], ["127.0.0.1"])
    assert again == first
    assert again[0].read_bytes() == pem
    moved = self_signed(tmp_path / "pki", "n1", ["n1", "localhost"], ["10.0.0.7"])
    assert moved[0].read_bytes() != pem
    cert = x509.load_pem_x509_certificate(moved[0].read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {"10.0.0.7"}


def test_given_serving_files_are_checked_at_start(tmp_path: Path) -> None:
    """The context is made at the first connection, but a key that is not the certificate's
    (or an unreadable file) still stops the start, as load_cert_chain did."""
    cert, _key = self_signed(tmp_path / "a", "n1", ["n1"], ["127.0.0.1"])
    _cert, other_key = self_signed(tmp_path / "b", "n2", ["n2"], ["127.0.0.1"])
    with pytest.raises(ValueError, match="is not the key of"):
        serving_tls(cert, other_key, None)
    with pytest.raises(ValueError, match="certificate"):
        serving_tls(other_key, other_key, None)
    with pytest.raises(FileNotFoundError):
        serving_tls(tmp_path / "missing.crt", other_key, None)
