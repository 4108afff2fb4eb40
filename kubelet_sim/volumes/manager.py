"""The node's volume manager: set up every volume a pod declares, and remove them with the pod.

Volumes live at `<root>/pods/<uid>/volumes/<plugin>/<name>` like the kubelet's. A setup pass is
idempotent and is meant to be repeated on every pod sync: ConfigMap and Secret changes then reach
running containers, and volumes that failed (say a ConfigMap not created yet) are retried.
Different pods touch disjoint directories; one pod's passes must not overlap (the pod worker
serialises them).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from kubelet_sim.logs import get_logger
from kubelet_sim.pod.spec import PodView
from kubelet_sim.volumes.plugins import PLUGINS, Context
from kubelet_sim.volumes.types import MountError, ObjectLookup, Prepared, TokenSource, VolumeSetup


def _safe(part: str) -> str:
    """Path parts come from the API (uid, volume name): refuse anything that could escape."""
    if not part or part in (".", "..") or "/" in part or "\0" in part:
        raise ValueError(f"unsafe path component {part!r}")
    return part


def failed_mount(volume: str, error: str) -> str:
    """The FailedMount event text (operationexecutor's GenerateError for MountVolume.SetUp)."""
    return f'MountVolume.SetUp failed for volume "{volume}" : {error}'


class VolumeManager:
    """Owns `<root>/pods/<uid>/volumes` for every pod on the node."""

    def __init__(self, root_dir: Path) -> None:
        self.root = root_dir.resolve()

    def volumes_dir(self, pod_uid: str) -> Path:
        return self.root / "pods" / _safe(pod_uid) / "volumes"

    def setup(
        self,
        pod: PodView,
        lookup: ObjectLookup,
        token: TokenSource | None,
        *,
        host_ip: str,
        pod_ip: str,
    ) -> VolumeSetup:
        """Bring every volume of `pod` up to date; failures are collected, never raised.

        `host_ip`/`pod_ip` are accepted for the caller's symmetry with env; volume downward API
        exposes only metadata fields (status.* is env-only upstream), so they are not written.
        """
        ctx = Context(pod, lookup, token, self.volumes_dir(pod.uid))
        result = VolumeSetup()
        for volume in pod.spec.get("volumes") or []:
            name = str(volume.get("name", ""))
            try:
                result.add(name, _setup_one(ctx, name, volume))
            except MountError as exc:
                result.errors.append(failed_mount(name, str(exc)))
                get_logger("kubelet_sim.volumes").warning(
                    "volume setup failed", pod=pod.full_name, volume=name, error=str(exc)
                )
        return result

    def teardown(self, pod_uid: str) -> None:
        """Remove the pod's volume directories (hostPath targets are the node's, left alone)."""
        shutil.rmtree(self.volumes_dir(pod_uid), ignore_errors=True)


def _setup_one(ctx: Context, name: str, volume: dict[str, Any]) -> Prepared:
    try:
        _safe(name)
    except ValueError as exc:
        raise MountError(str(exc)) from exc
    kinds = [key for key in volume if key != "name"]
    if not kinds:  # the API server defaults a volume without a source to emptyDir
        return PLUGINS["emptyDir"](ctx, name, {})
    plugin = PLUGINS.get(kinds[0])
    if plugin is None:
        raise MountError(f"volume type {kinds[0]} is not supported by kubelet-sim")
    try:
        return plugin(ctx, name, volume[kinds[0]] or {})
    except OSError as exc:
        raise MountError(str(exc)) from exc
