"""Client certificate chains as Go's crypto/x509 takes them: version 1 certificates allowed as
the client's own certificate (the leaf) and as a configured client CA (a root), never between.

`cryptography`'s verifier refuses every certificate that is not version 3. Go's Verify checks
no version: a leaf needs none of the extensions a v1 certificate cannot carry, a root is trusted
as it is (CheckSignatureFrom refuses only a *version 3* parent without basicConstraints), and
an intermediate must have basicConstraints with cA (isValid's NotAuthorizedToSign), which a v1
certificate cannot. So the verifier still checks every version 3 certificate of a chain, and a
v1 end is checked here as Go checks it: signed by its issuer, valid now, with a key and
signature algorithm the verifier's profile allows in any certificate. A v1 leaf's issuer is
verified as the end of its own chain (the CA profile and clientAuth usage), and the path
lengths above it counted with it; a v1 root is replaced, as the anchor, by the certificate it
signed.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.verification import (
    ClientVerifier,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

UNKNOWN_AUTHORITY = "x509: certificate signed by unknown authority"
NOT_AUTHORIZED = "x509: certificate is not authorized to sign other certificates"
TOO_MANY_INTERMEDIATES = "x509: too many intermediates for path length constraint"
NOT_VALID_NOW = "x509: certificate has expired or is not yet valid"
# Issuers of a v1 leaf among the certificates a client sends that are verified up to a root:
# a cross-signed intermediate comes twice; more would only multiply the verifier's work.
SENT_ISSUERS = 2
_V1 = x509.Version.v1
_HASHES = (hashes.SHA256, hashes.SHA384, hashes.SHA512)  # the verifier's: no SHA-1, no MD5
_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)


class Chains:
    """Builds and checks a client's chain up to `roots`, for client auth, at a given time."""

    def __init__(
        self,
        roots: Sequence[x509.Certificate],
        ca_policy: ExtensionPolicy,
        ee_policy: ExtensionPolicy,
        max_depth: int,
    ) -> None:
        self.ca_policy, self.ee_policy, self.max_depth = ca_policy, ee_policy, max_depth
        self.roots = list(roots)
        v3 = [r for r in roots if r.version is not _V1]
        self._store = Store(v3) if v3 else None
        self._v1_roots = [r for r in roots if r.version is _V1]

    def verify(
        self, leaf: x509.Certificate, others: Sequence[x509.Certificate], now: datetime.datetime
    ) -> list[x509.Certificate]:
        """The verified chain, the leaf first; raises VerificationError."""
        if leaf.version is _V1:
            return self._from_v1_leaf(leaf, others, now)
        return self._to_root(leaf, others, self.ee_policy, now)

    def _from_v1_leaf(
        self, leaf: x509.Certificate, others: Sequence[x509.Certificate], now: datetime.datetime
    ) -> list[x509.Certificate]:
        """Go's checks of a leaf without extensions, then its issuer's own chain."""
        problem = _problem(leaf, now)
        if problem:
            raise VerificationError(problem)
        error = VerificationError(UNKNOWN_AUTHORITY)
        trusted = _issuers_of(leaf, self.roots)
        sent = [c for c in _issuers_of(leaf, list(others)) if c not in trusted]
        for issuer in [*trusted, *sent[:SENT_ISSUERS]]:
            if issuer.version is _V1:
                problem = _problem(issuer, now) if issuer in self._v1_roots else NOT_AUTHORIZED
                if not problem:
                    return [leaf, issuer]
                error = VerificationError(problem)
                continue
            try:
                chain = self._to_root(issuer, _without(others, issuer), self.ca_policy, now)
            except VerificationError as exc:
                error = exc
                continue
            if _too_deep(chain):
                error = VerificationError(TOO_MANY_INTERMEDIATES)
                continue
            return [leaf, *chain]
        raise error

    def _to_root(
        self,
        cert: x509.Certificate,
        others: Sequence[x509.Certificate],
        ee_policy: ExtensionPolicy,
        now: datetime.datetime,
    ) -> list[x509.Certificate]:
        """The verifier's chain from a version 3 `cert`, ending at a v3 root or, past the
        certificate a v1 root signed, at that root."""
        error = VerificationError(UNKNOWN_AUTHORITY)
        if self._store is not None:
            try:
                return list(
                    self._verifier(self._store, ee_policy, now).verify(cert, list(others)).chain
                )
            except VerificationError as exc:
                error = exc
        for root in self._v1_roots:
            children, problem = _signed_by(root, [cert, *others]), _problem(root, now)
            if children and problem:
                error = VerificationError(problem)
                continue
            for child in children:
                verifier = self._verifier(Store([child]), ee_policy, now)
                try:
                    chain = verifier.verify(cert, _without(others, child)).chain
                except VerificationError as exc:
                    error = exc
                    continue
                return [*chain, root]
        raise error

    def _verifier(
        self, store: Store, ee_policy: ExtensionPolicy, now: datetime.datetime
    ) -> ClientVerifier:
        return (
            PolicyBuilder()
            .store(store)
            .time(now)
            .max_chain_depth(self.max_depth)
            .extension_policies(ca_policy=self.ca_policy, ee_policy=ee_policy)
            .build_client_verifier()
        )


def _issuers_of(
    cert: x509.Certificate, candidates: list[x509.Certificate]
) -> list[x509.Certificate]:
    """The candidates whose key signed `cert` (each at most once)."""
    return [c for i, c in enumerate(candidates) if c not in candidates[:i] and _signed(cert, c)]


def _signed_by(
    issuer: x509.Certificate, candidates: list[x509.Certificate]
) -> list[x509.Certificate]:
    return [c for c in candidates if _signed(c, issuer)]


def _signed(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    if cert.issuer != issuer.subject:
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _without(certs: Sequence[x509.Certificate], cert: x509.Certificate) -> list[x509.Certificate]:
    return [c for c in certs if c != cert]


def _too_deep(chain: list[x509.Certificate]) -> bool:
    """Whether a CA above a v1 leaf's issuer (chain[0], an intermediate when more follow)
    allows fewer intermediates below it than there are: Go's count, the verifier's one more."""
    for below, cert in enumerate(chain[1:], start=1):
        try:
            limit = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            continue
        if limit.path_length is not None and below > limit.path_length:
            return True
    return False


def _problem(cert: x509.Certificate, now: datetime.datetime) -> str:
    """What the verifier's profile asks of any certificate that a v1 one can fail ("" if
    nothing): valid now, a key it allows, a signature algorithm it allows."""
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        return NOT_VALID_NOW
    try:
        key, digest = cert.public_key(), cert.signature_hash_algorithm
    except (ValueError, UnsupportedAlgorithm) as exc:
        return f"x509: {exc}"
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < 2048:
        return f"x509: an RSA key of {key.key_size} bits, less than 2048"
    if not isinstance(key, rsa.RSAPublicKey) and not (
        isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, _CURVES)
    ):
        return "x509: a key other than RSA or ECDSA on P-256, P-384 or P-521"
    if not isinstance(digest, _HASHES):
        return f"x509: signature algorithm {cert.signature_algorithm_oid.dotted_string}"
    return ""
