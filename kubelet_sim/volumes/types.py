"""The volume layer's contract: what it needs from the API side and what it hands back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ("ConfigMap" | "Secret", namespace, name) -> the object as the API returns it, None if absent.
# Any other failure (API down) is raised; its text becomes the FailedMount message.
ObjectLookup = Callable[[str, str, str], dict[str, Any] | None]

# (namespace, serviceAccountName, expirationSeconds, audiences) -> a bound token; raises on error.
TokenSource = Callable[[str, str, int, list[str]], str]


class MountError(Exception):
    """One volume could not be set up; the text is the plugin's error, as the kubelet words it."""


class VolumeError(ValueError):
    """A container's volumeMount cannot be honoured (unknown volume, bad subPath)."""


@dataclass(frozen=True)
class Prepared:
    """One volume, ready on disk: where it is and how containers must mount it."""

    path: Path
    read_only: bool = False  # configMap, secret, projected, downwardAPI: always mounted ro
    tmpfs: bool = False  # emptyDir of medium Memory where the node may not mount: Docker's tmpfs


@dataclass
class VolumeSetup:
    """The outcome of one setup pass over a pod's volumes.

    `errors` are the FailedMount event messages; the pod's containers must not start while any
    remain, but the volumes that did succeed are in `paths` (a resync retries the others).
    """

    paths: dict[str, Path] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    read_only: set[str] = field(default_factory=set)
    tmpfs: set[str] = field(default_factory=set)
    # The pod's fsGroup: a memory emptyDir (made by Docker) gets it as its root's group.
    fs_group: int | None = None
    # The pod's directory, where subPaths are bind-mounted; None when the node may not mount.
    subpath_staging: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, name: str, prepared: Prepared) -> None:
        self.paths[name] = prepared.path
        if prepared.read_only:
            self.read_only.add(name)
        if prepared.tmpfs:
            self.tmpfs.add(name)
