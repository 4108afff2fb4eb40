"""k8s.io/apiserver's x509 authenticator for the kubelet API's client certificates, on
`cryptography`'s path verifier (`cryptography.x509.verification`, its client policy).

The verifier builds and checks the chain: signatures, validity, basicConstraints and path
length, name constraints, and extended key usage (clientAuth) across the chain, so that an
intermediate limited to serverAuth cannot vouch for a client. Its Web PKI profile is relaxed
only where Go's crypto/x509 (what the kubelet runs) accepts more and Kubernetes' own
certificates rely on it: no authorityKeyIdentifier or subjectAltName needed in a client
certificate, anyExtendedKeyUsage accepted in one, and a CA without keyUsage (one that has it
must allow keyCertSign). It stays stricter than Go in what the Web PKI forbids: RSA keys under
2048 bits, keys other than RSA and P-256/384/521. Version 1 certificates, which the verifier
refuses, are taken where Go takes them: as the client's own and as a client CA (`x509v1`).

The cost a client can make us pay is bounded before any signature is checked: at most
`MAX_CHAIN` certificates (more are refused unread), RSA keys of at most `MAX_RSA_BITS` (Go's
crypto/tls limit) with public exponents of at most 2^31-1 (Go's crypto/rsa limit: a
3,000-bit exponent made each check cost 100 times more) in any of them, and the verifier's own
budget of 128 signature checks. The result is kept per connection (until the chain's first
expiry), so a keep-alive client costs one verification, not one per request; the checks that
fail are bounded per client address and per process as failed TokenReviews are
(`budgets.FailureBudget`). A chain that cannot be read or verified, for whatever reason (a key
of a type cryptography does not know raises UnsupportedAlgorithm), is an error like any other:
401 unless a bearer token vouches.

Apart from `tls` so that `cryptography` is imported at a node's first request, not at start.
"""

from __future__ import annotations

import datetime
import functools
import ssl
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import Criticality, ExtensionPolicy, VerificationError

from kubelet_sim.kube.reviews import User
from kubelet_sim.logs import get_logger
from kubelet_sim.server.budgets import FailureBudget
from kubelet_sim.server.peer_chain import PeerChain, intermediates_readable, peer_chain
from kubelet_sim.server.tls import PeerCertificate, file_stamp
from kubelet_sim.server.x509v1 import NOT_AUTHORIZED, UNKNOWN_AUTHORITY, Chains

MAX_CHAIN = 8  # certificates a client may send, its own included (the verifier's default depth)
MAX_RSA_BITS = 8192  # Go's crypto/tls refuses larger RSA keys
MAX_RSA_EXPONENT = 2**31 - 1  # Go's crypto/rsa refuses larger public exponents (each bit costs)
# the verifier's words for what Go's x509 says otherwise (what the kubelet would log)
_GO_WORDS = {
    "all candidates exhausted with no interior errors": UNKNOWN_AUTHORITY,
    "cert is not valid at validation time": "x509: certificate has expired or is not yet valid",
    "certificate must be an X509v3 certificate": NOT_AUTHORIZED,  # a v1 CA the verifier met
}
_NEVER = float("inf")
_Found = tuple[PeerCertificate | None, float]  # what a client is, and until when it holds


def _client_usage(_policy: object, _cert: x509.Certificate, usages: object) -> None:
    """A client certificate's extendedKeyUsage, if it has one, allows client auth (or any)."""
    if isinstance(usages, x509.ExtendedKeyUsage):
        allowed = {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
        if not allowed & set(usages):
            raise ValueError("x509: certificate specifies an incompatible key usage")


def _may_sign(_policy: object, _cert: x509.Certificate, usage: object) -> None:
    if isinstance(usage, x509.KeyUsage) and not usage.key_cert_sign:
        raise ValueError("a CA's keyUsage does not allow keyCertSign")


_CA_POLICY = ExtensionPolicy.webpki_defaults_ca().may_be_present(
    x509.KeyUsage, Criticality.AGNOSTIC, _may_sign
)
_EE_POLICY = (
    ExtensionPolicy.webpki_defaults_ee()
    .may_be_present(x509.AuthorityKeyIdentifier, Criticality.NON_CRITICAL, None)
    .may_be_present(x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
    .may_be_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC, _client_usage)
)


class X509Authenticator:
    """k8s.io/apiserver's x509 authenticator: the client's chain must verify up to one of
    `roots` now, for client auth; the user is the leaf's CN, each O a group."""

    def __init__(self, roots: Sequence[x509.Certificate] = ()) -> None:
        self.roots = list(roots)
        self._chains = Chains(self.roots, _CA_POLICY, _EE_POLICY, MAX_CHAIN - 1) if roots else None
        self._lock = threading.Lock()
        # per connection: (what it is, until when): one verification per keep-alive client
        self._seen: weakref.WeakKeyDictionary[ssl.SSLSocket, _Found] = weakref.WeakKeyDictionary()

    @classmethod
    def from_pem(cls, pem: bytes) -> X509Authenticator:
        """Raises ValueError for a file with no certificate or one that does not parse."""
        return cls(x509.load_pem_x509_certificates(pem))

    def authenticate(
        self, conn: ssl.SSLSocket, budget: FailureBudget | None = None, client: str = ""
    ) -> PeerCertificate | None:
        """None when no certificate was presented. A chain to check spends one failure of
        `client`'s `budget` (given back if it verifies); raises Throttled when there is none
        left, before anything is read (and nothing is kept: the next request asks again)."""
        now = _now().timestamp()
        with self._lock:
            seen = self._seen.get(conn)
        if seen is not None and now < seen[1]:
            return seen[0]
        chain = peer_chain(conn, MAX_CHAIN)
        if chain is None:
            found: _Found = (None, _NEVER)
        else:
            spent = budget.spend(client) if budget is not None else None
            found = self._checked(chain)
            if budget is not None and spent is not None and found[0] and found[0].user:
                budget.refund(spent)
        with self._lock:
            self._seen[conn] = found
        return found[0]

    def _checked(self, chain: PeerChain) -> tuple[PeerCertificate, float]:
        if not chain.certificates:
            error = f"x509: {chain.sent} certificates sent, more than {MAX_CHAIN}"
            return PeerCertificate(None, error), _NEVER
        return self._verify(chain.certificates[0], chain.certificates[1:])

    def verify(self, der: bytes, intermediates: Sequence[bytes] = ()) -> PeerCertificate:
        return self._verify(der, intermediates)[0]

    def _verify(self, der: bytes, intermediates: Sequence[bytes]) -> tuple[PeerCertificate, float]:
        """The result, and until when it holds (the verified chain's first expiry)."""
        if 1 + len(intermediates) > MAX_CHAIN:
            error = f"x509: {1 + len(intermediates)} certificates sent, more than {MAX_CHAIN}"
            return PeerCertificate(None, error), _NEVER
        try:
            leaf = x509.load_der_x509_certificate(der)
            others = [x509.load_der_x509_certificate(c) for c in intermediates]
            too_large = _too_large(leaf, *others)
        except (ValueError, UnsupportedAlgorithm) as exc:  # a key of no known type among them
            return PeerCertificate(None, f"unreadable certificate: {exc}"), _NEVER
        name = f'"{leaf.subject.rfc4514_string()}"'
        if too_large:
            return PeerCertificate(
                None, f"verifying certificate {name} failed: {too_large}"
            ), _NEVER
        if self._chains is None:
            return PeerCertificate(
                None, f"verifying certificate {name} failed: {UNKNOWN_AUTHORITY}"
            ), _NEVER
        try:
            chain = self._chains.verify(leaf, others, _now())
        except VerificationError as exc:
            return PeerCertificate(
                None, f"verifying certificate {name} failed: {_words(exc)}"
            ), _NEVER
        until = min(c.not_valid_after_utc for c in chain).timestamp()
        cn = [str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        if not cn or not cn[0]:
            return PeerCertificate(None, ""), until  # no user: not an error, not authenticated
        orgs = [
            str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        ]
        return PeerCertificate(User(cn[0], (*orgs, "system:authenticated"))), until


def _too_large(*certs: x509.Certificate) -> str:
    """Why a key is refused before any signature is checked with it ("" if none is). Raises
    UnsupportedAlgorithm for a key of no type cryptography knows."""
    for cert in certs:
        key = cert.public_key()
        if isinstance(key, rsa.RSAPublicKey) and key.key_size > MAX_RSA_BITS:
            return f"x509: an RSA key of {key.key_size} bits, more than {MAX_RSA_BITS}"
        if isinstance(key, rsa.RSAPublicKey) and key.public_numbers().e > MAX_RSA_EXPONENT:
            bits = key.public_numbers().e.bit_length()
            return f"x509: an RSA public exponent of {bits} bits, more than 2^31-1"
    return ""


def _words(exc: VerificationError) -> str:
    text = str(exc).split(" (encountered processing", 1)[0]
    text = text.replace("Python extension validator failed: ValueError: ", "")
    for theirs, ours in _GO_WORDS.items():
        if theirs in text:
            return ours
    return text.removeprefix("validation failed: ")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class ClientCa:
    """A client CA file, read again when it changes (device, inode, mtime or size: a file
    replaced by a rename or written in place), as the kubelet's dynamic CA content reloads
    --client-ca-file. A file that cannot be read or holds no certificate keeps the last good
    one in force, and says so once per change."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = ()  # () : never read
        self._current = X509Authenticator()
        self._log = get_logger("kubelet_sim.server")
        if path and not intermediates_readable():
            self._log.warning(
                "this Python's ssl gives no client's intermediate certificates: a client"
                " certificate must be signed by the client CA itself"
            )

    def current(self) -> X509Authenticator:
        if not self.path:
            return self._current
        stamp = file_stamp(self.path)
        with self._lock:
            if stamp == self._stamp:
                return self._current
            self._stamp = stamp
            try:
                self._current = X509Authenticator.from_pem(Path(self.path).read_bytes())
            except (OSError, ValueError) as exc:
                self._log.error(
                    "client CA file not reloaded: the last one read stays in force",
                    file=self.path, error=str(exc),
                )  # fmt: skip
            else:
                self._log.info("client CA file loaded", file=self.path)
            return self._current


@functools.cache
def client_ca(path: str | None) -> ClientCa:
    """One per file for all the nodes of the process that trust it."""
    return ClientCa(path)
