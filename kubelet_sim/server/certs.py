"""The serving certificate: given files, or one made at start for the node's names and IPs.

API servers do not verify a kubelet's serving certificate unless told to (kube-apiserver's
`--kubelet-certificate-authority`), so the kubelet makes a self-signed one when none is given;
so do we. `cryptography` makes it: writing X.509 by hand is not a job for this project.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelet_sim.pem import write_private_key

VALID_FOR = datetime.timedelta(days=365)


def self_signed(
    directory: Path, node_name: str, names: list[str], ips: list[str]
) -> tuple[Path, Path]:
    """kubelet.crt and kubelet.key in `directory` (the key 0600), for `names` and `ips`."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}@{int(now.timestamp())}")]
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(names) if n]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips) if i]
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
    cert_path, key_path = directory / "kubelet.crt", directory / "kubelet.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_private_key(key_path, key)
    return cert_path, key_path
