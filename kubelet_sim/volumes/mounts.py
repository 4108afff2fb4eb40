"""A container's volumeMounts as runtime mounts (the kubelet's makeMounts, without /etc/hosts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubelet_sim import cri
from kubelet_sim.pod.spec import ContainerView
from kubelet_sim.volumes.types import VolumeError, VolumeSetup


def mounts_for(container: ContainerView, setup: VolumeSetup) -> list[cri.Mount]:
    """One mount per volumeMount; raises VolumeError with the kubelet's text when impossible."""
    return [_mount(container.name, raw, setup) for raw in container.raw.get("volumeMounts") or []]


def _mount(container: str, raw: dict[str, Any], setup: VolumeSetup) -> cri.Mount:
    name = str(raw.get("name", ""))
    volume_path = setup.paths.get(name)
    if volume_path is None:
        raise VolumeError(f"cannot find volume {name!r} to mount into container {container!r}")
    if raw.get("subPathExpr"):
        raise VolumeError(f"subPathExpr of volumeMount {name!r} is not supported by kubelet-sim")
    host_path = volume_path
    if raw.get("subPath"):
        host_path = _sub_path(volume_path, str(raw["subPath"]), name, container)
    return cri.Mount(
        host_path=str(host_path),
        container_path=str(raw.get("mountPath", "")),
        read_only=bool(raw.get("readOnly")) or name in setup.read_only,
        tmpfs=name in setup.tmpfs,
    )


def _sub_path(volume: Path, sub_path: str, name: str, container: str) -> Path:
    """The subPath inside the volume, created if missing; symlinks may not lead outside it.

    A configMap key resolves to its file in the current timestamped directory, so like upstream
    a subPath mount does not see later updates.
    """
    if os.path.isabs(sub_path):
        raise VolumeError(f"error SubPath `{sub_path}` must not be an absolute path")
    if ".." in Path(sub_path).parts:
        raise VolumeError(f"unable to provision SubPath `{sub_path}`: must not contain '..'")
    base = volume.resolve()
    target = (volume / sub_path).resolve()
    if target != base and base not in target.parents:
        raise VolumeError(f"subpath {str(target)!r} not within volume path {str(base)!r}")
    if not target.exists():
        try:
            target.mkdir(parents=True)
            os.chmod(target, base.stat().st_mode & 0o7777)  # as the volume, like SafeMakeDir
        except OSError as exc:
            raise VolumeError(
                f"failed to create subPath directory for volumeMount {name!r} of container"
                f" {container!r}"
            ) from exc
    return target
