"""Files that hold secrets, written the one way: created 0600 (never readable by others, not
even for a moment under a loose umask), complete or not at all (a temporary file renamed into
place), and a file that was already there with a looser mode is replaced, so it ends 0600.
Private keys go as PEM (PKCS8)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def write_private(path: Path, data: bytes) -> Path:
    """`data` at `path`, mode 0600, atomically."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def copy_private(source: Path, target: Path) -> Path:
    """A copy of a file with secrets in it (a kubeconfig), as write_private writes."""
    return write_private(target, source.read_bytes())


def write_private_key(path: Path, key: PrivateKey) -> None:
    write_private(
        path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
