"""k8s.io/apiserver's x509 authenticator for the kubelet API's client certificates.

Apart from `tls` so that `cryptography` is imported at a node's first request, not at start.
"""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelet_sim.kube.reviews import User
from kubelet_sim.server.tls import PeerCertificate

MAX_CHAIN = 8  # intermediates walked at most


class X509Authenticator:
    """k8s.io/apiserver's x509 authenticator: the leaf must chain to a client CA (through
    intermediates the client sent, where this Python can read them), be valid now and, if it
    names usages, allow client auth; the user is its CN, each O a group."""

    def __init__(self, ca_file: str | None) -> None:
        self.roots: list[x509.Certificate] = []
        if ca_file:
            self.roots = x509.load_pem_x509_certificates(Path(ca_file).read_bytes())

    def authenticate(self, conn: ssl.SSLSocket) -> PeerCertificate | None:
        """None when no certificate was presented."""
        der = conn.getpeercert(binary_form=True)
        if not der:
            return None
        chain: Sequence[bytes] = ()
        unverified = getattr(conn, "get_unverified_chain", None)  # Python 3.13
        if unverified is not None:
            chain = [c if isinstance(c, bytes) else c.public_bytes() for c in unverified() or ()]
        return self.verify(der, chain[1:])

    def verify(self, der: bytes, intermediates: Sequence[bytes] = ()) -> PeerCertificate:
        try:
            leaf = x509.load_der_x509_certificate(der)
            others = [x509.load_der_x509_certificate(c) for c in intermediates]
        except ValueError as exc:
            return PeerCertificate(None, f"unreadable certificate: {exc}")
        name = _subject(leaf)
        failure = self._chain_failure(leaf, others)
        if failure:
            return PeerCertificate(None, f"verifying certificate {name} failed: {failure}")
        cn = [str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        if not cn or not cn[0]:
            return PeerCertificate(None, "")  # no user: not an error, not authenticated
        orgs = [
            str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        ]
        return PeerCertificate(User(cn[0], (*orgs, "system:authenticated")))

    def _chain_failure(self, leaf: x509.Certificate, others: list[x509.Certificate]) -> str:
        now = datetime.datetime.now(datetime.UTC)
        if not leaf.not_valid_before_utc <= now <= leaf.not_valid_after_utc:
            return "x509: certificate has expired or is not yet valid"
        try:
            usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            allowed = {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
            if not allowed & set(usages):
                return "x509: certificate specifies an incompatible key usage"
        except x509.ExtensionNotFound:
            pass
        current = leaf
        for _ in range(MAX_CHAIN):
            for root in self.roots:
                if _issued_by(current, root, now):
                    return ""
            step = next((c for c in others if _is_ca(c) and _issued_by(current, c, now)), None)
            if step is None:
                break
            current = step
        return "x509: certificate signed by unknown authority"


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate, now: datetime.datetime) -> bool:
    if not issuer.not_valid_before_utc <= now <= issuer.not_valid_after_utc:
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _subject(cert: x509.Certificate) -> str:
    return f'"{cert.subject.rfc4514_string()}"'
