"""The kubelet API's TLS: the serving context, and client certificates checked as the kubelet
checks them.

Go's kubelet asks for a client certificate without checking it in the handshake
(`tls.RequestClientCert`); k8s.io/apiserver's x509 authenticator verifies it afterwards, and a
certificate that does not verify is an authentication error like any other: the request goes
on to a bearer token, and ends in 401 if nothing vouches for it. Python's ssl has no such mode:
it fails the handshake. So the context is given, through OpenSSL's own API, a verify callback
that accepts every chain (OpenSSL still records the certificate), and `X509Authenticator`
verifies the peer's certificate against the client CA with `cryptography` per request.

Reaching the SSL_CTX behind an `ssl.SSLContext` relies on CPython's layout (the pointer is the
object's first field) and on libssl being loaded as a shared library; both are checked before
use (the verify mode read through the pointer must follow the one set from Python), and where
they do not hold the context keeps verifying in the handshake, as before, and says so.
"""

from __future__ import annotations

import ctypes
import datetime
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelet_sim.kube.reviews import User

_SSL_VERIFY_NONE, _SSL_VERIFY_PEER = 0, 1
_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
MAX_CHAIN = 8  # intermediates walked at most


def _accept(_preverify_ok: int, _store: int | None) -> int:
    return 1  # the authenticator decides, per request


_accept_any = _VERIFY_CALLBACK(_accept)  # kept alive here: OpenSSL holds a pointer to it


def _libssl() -> ctypes.CDLL | None:
    """The libssl this process's `_ssl` uses (already loaded: dlopen returns the same one)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "libssl.so" in line]
    except OSError:
        return None
    if not paths:
        return None  # _ssl linked statically: no symbols to reach
    lib = ctypes.CDLL(paths[0])
    lib.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
    lib.SSL_CTX_get_verify_mode.restype = ctypes.c_int
    lib.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CALLBACK]
    lib.SSL_CTX_set_verify.restype = None
    return lib


def _request_client_certificate(context: ssl.SSLContext) -> bool:
    """Ask for a client certificate and accept any in the handshake (Go's RequestClientCert).
    False if this Python's ssl cannot be reached that way (the handshake then verifies)."""
    lib = _libssl()
    if lib is None:
        return False
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not pointer:
        return False
    context.verify_mode = ssl.CERT_NONE
    if lib.SSL_CTX_get_verify_mode(pointer) != _SSL_VERIFY_NONE:
        return False
    context.verify_mode = ssl.CERT_OPTIONAL
    if lib.SSL_CTX_get_verify_mode(pointer) != _SSL_VERIFY_PEER:
        return False
    # CPython keeps an SSL_CTX's callback when verify_mode changes, and copies it to each SSL.
    lib.SSL_CTX_set_verify(pointer, _SSL_VERIFY_PEER, _accept_any)
    return True


@dataclass(frozen=True)
class PeerCertificate:
    """What the x509 authenticator made of the client's certificate: its user, or why not."""

    user: User | None
    error: str = ""


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


@dataclass
class ServingTls:
    context: ssl.SSLContext
    authenticator: X509Authenticator
    verified_in_handshake: bool  # True where the ctypes path was not available


def serving_tls(cert_file: Path, key_file: Path, client_ca_file: str | None) -> ServingTls:
    """Raises OSError or ssl.SSLError (or ValueError for a CA file that holds no certificate)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    authenticator = X509Authenticator(client_ca_file)
    in_handshake = False
    if client_ca_file:
        context.load_verify_locations(client_ca_file)  # what a handshake that verifies uses
        if not _request_client_certificate(context):
            context.verify_mode = ssl.CERT_OPTIONAL
            in_handshake = True
    return ServingTls(context, authenticator, in_handshake)
