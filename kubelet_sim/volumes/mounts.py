"""A container's volumeMounts as runtime mounts (the kubelet's makeMounts, without /etc/hosts)."""

from __future__ import annotations

from typing import Any

from kubelet_sim import cri
from kubelet_sim.linux.safe_paths import bind_target_problem
from kubelet_sim.pod.spec import ContainerView
from kubelet_sim.volumes.subpath import prepare_sub_path
from kubelet_sim.volumes.types import VolumeError, VolumeSetup


def mounts_for(container: ContainerView, setup: VolumeSetup) -> list[cri.Mount]:
    """One mount per volumeMount; raises VolumeError with the kubelet's text when impossible."""
    return [
        _mount(container.name, index, raw, setup)
        for index, raw in enumerate(container.raw.get("volumeMounts") or [])
    ]


def _mount(container: str, index: int, raw: dict[str, Any], setup: VolumeSetup) -> cri.Mount:
    name = str(raw.get("name", ""))
    mount_path = str(raw.get("mountPath", ""))
    problem = bind_target_problem(mount_path)
    if problem:
        raise VolumeError(f"invalid mountPath {mount_path!r} of volumeMount {name!r}: {problem}")
    volume_path = setup.paths.get(name)
    if volume_path is None:
        raise VolumeError(f"cannot find volume {name!r} to mount into container {container!r}")
    if raw.get("subPathExpr"):
        raise VolumeError(f"subPathExpr of volumeMount {name!r} is not supported by kubelet-sim")
    host_path = volume_path
    if raw.get("subPath"):
        # A configMap key resolves to its file in the current timestamped directory, so like
        # upstream a subPath mount does not see later updates.
        host_path = prepare_sub_path(
            volume_path,
            str(raw["subPath"]),
            volume_name=name,
            container=container,
            index=index,
            staging=setup.subpath_staging,
        )
    return cri.Mount(
        host_path=str(host_path),
        container_path=mount_path,
        read_only=bool(raw.get("readOnly")) or name in setup.read_only,
        tmpfs=name in setup.tmpfs,
        tmpfs_group=setup.fs_group if name in setup.tmpfs else None,
    )
