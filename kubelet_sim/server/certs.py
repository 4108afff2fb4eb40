"""The serving certificate: given files, or one made at start for the node's names and IPs.

API servers do not verify a kubelet's serving certificate unless told to (kube-apiserver's
`--kubelet-certificate-authority`), so the kubelet makes a self-signed one when none is given;
so do we. `cryptography` makes it: writing X.509 by hand is not a job for this project. An EC
P-256 key (Go's TLS client takes it), made in microseconds where RSA takes tens of
milliseconds. The files of an earlier start are kept while they name the same names and IPs
and have a month to run, as the kubelet keeps what its certificate directory holds: a thousand
nodes restart without signing a thousand certificates again.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelet_sim.formats.pem import write_private_key

VALID_FOR = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)


def self_signed(
    directory: Path, node_name: str, names: list[str], ips: list[str]
) -> tuple[Path, Path]:
    """kubelet.crt and kubelet.key in `directory` (the key 0600), for `names` and `ips`."""
    cert_path, key_path = directory / "kubelet.crt", directory / "kubelet.key"
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(names) if n]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips) if i]
    now = datetime.datetime.now(datetime.UTC)
    if _still_good(cert_path, key_path, sans, now):
        return cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}@{int(now.timestamp())}")]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_private_key(key_path, key)
    return cert_path, key_path


def _still_good(
    cert_path: Path, key_path: Path, sans: list[x509.GeneralName], now: datetime.datetime
) -> bool:
    """An earlier start's pair: its key, the same names, a month or more to run."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        named = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound):
        return False
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return (
        set(named) == set(sans)
        and cert.not_valid_before_utc <= now
        and cert.not_valid_after_utc - now >= RENEW_BEFORE
        and key.public_key().public_bytes(*spki) == cert.public_key().public_bytes(*spki)
    )
