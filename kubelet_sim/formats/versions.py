"""Which Kubernetes minor version an API server is: from its /version gitVersion ("v1.24.3"),
or, for a build that stamped none ("v0.0.0-master", as the rig's), from the fields its schema
knows, newest first. One reading for the status rules (pod/generation.py) and the requests
whose shape changed (kube/tls_bootstrap.py's CSR usages)."""

from __future__ import annotations

from collections.abc import Callable

# A field and the minor version that brought it; a schema without any is from before v1.27.
_MARKERS = (
    ("io.k8s.api.core.v1.ContainerStatus.volumeMounts", 30),
    ("io.k8s.api.core.v1.PodStatus.hostIPs", 28),
    ("io.k8s.api.core.v1.ContainerStatus.allocatedResources", 27),
)
BEFORE_MARKERS = 26


def server_minor(git_version: str | None, knows: Callable[[], set[str]]) -> int | None:
    """The minor version; `knows()` ("Definition.property" names) is read only when the
    version says nothing. None: nothing to tell by (an empty schema)."""
    minor = minor_of(git_version)
    if minor is not None:
        return minor
    known = knows()
    if not known:
        return None
    return next((since for marker, since in _MARKERS if marker in known), BEFORE_MARKERS)


def minor_of(git_version: str | None) -> int | None:
    text = (git_version or "").lstrip("v").split("-")[0].split("+")[0]
    parts = text.split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    major, minor = int(parts[0]), int(parts[1])
    return minor if major == 1 else None
