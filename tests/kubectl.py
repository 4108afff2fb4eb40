"""The suite's one kubectl: PATH's, run against a kubeconfig with the deadline scale."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from tests.cluster import deadline_scale

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed here")


def kubectl(
    kubeconfig: str,
    *args: str,
    namespace: str | None = None,
    stdin: bytes | None = None,
    text: bool = False,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[Any]:
    """kubectl's result, whatever its exit code (the test judges it); skips the test where no
    kubectl is installed."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed here")
    where = ["-n", namespace] if namespace else []
    return subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, *where, *args],
        input=stdin,
        capture_output=True,
        text=text,
        timeout=timeout * deadline_scale(),
        check=False,
    )
