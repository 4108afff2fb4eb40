"""The node's volume manager: set up every volume a pod declares, and remove them with the pod.

Volumes live at `<root>/pods/<uid>/volumes/<plugin>/<name>` like the kubelet's; the root is 0700
and each pod's directory 0750 whatever the umask, and secret, projected (service account token)
and downwardAPI volumes are tmpfs mounts, as the kubelet makes them, so that their content never
reaches the disk (when the agent may mount; else on disk, said once at start). A setup pass is
idempotent and is meant to be repeated on every pod sync: ConfigMap and Secret changes then reach
running containers, and volumes that failed (say a ConfigMap not created yet) are retried.
Different pods touch disjoint directories; one pod's passes must not overlap (the pod worker
serialises them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet_sim.formats.quantity import value
from kubelet_sim.linux.safe_paths import make_dir, remove_tree, safe_part
from kubelet_sim.logs import get_logger
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.spec import PodView
from kubelet_sim.volumes.hostmount import mount_points_under, unmount
from kubelet_sim.volumes.plugins import PLUGINS, Context
from kubelet_sim.volumes.types import MountError, ObjectLookup, Prepared, TokenSource, VolumeSetup


def failed_mount(volume: str, error: str) -> str:
    """The FailedMount event text (operationexecutor's GenerateError for MountVolume.SetUp)."""
    return f'MountVolume.SetUp failed for volume "{volume}" : {error}'


ROOT_MODE, POD_DIR_MODE = 0o700, 0o750  # the kubelet's pod dirs are 0750


class VolumeManager:
    """Owns `<root>/pods/<uid>/volumes` (and the pod's subPath mounts) for every pod on the node.

    `allocatable` is the node's (Node.status.allocatable): its memory is the size of a pod's
    tmpfs volumes unless the pod's memory limit is smaller (the kubelet's
    calculateEmptyDirMemorySize), and downward API files read it for an unset limit. `mount`:
    whether this process may mount, a fact of the host read once for the process (`HostFacts`).
    """

    def __init__(self, root_dir: Path, *, allocatable: Allocatable, mount: bool) -> None:
        self.root = root_dir.resolve()
        self.allocatable = allocatable
        self.memory_bytes = self.allocatable.memory_bytes
        self.mount = mount
        self._owned: dict[str, set[str]] = {}  # pod uid → its volumes whose fsGroup is set

    def pod_dir(self, pod_uid: str) -> Path:
        return self.root / "pods" / safe_part(pod_uid)

    def volumes_dir(self, pod_uid: str) -> Path:
        return self.pod_dir(pod_uid) / "volumes"

    def make_pod_dir(self, pod_uid: str) -> Path:
        """`<root>` 0700, `<root>/pods/<uid>` and its `volumes` 0750."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        make_dir(self.root, ROOT_MODE)
        make_dir(self.root / "pods", POD_DIR_MODE)
        make_dir(self.pod_dir(pod_uid), POD_DIR_MODE)
        return make_dir(self.volumes_dir(pod_uid), POD_DIR_MODE)

    def setup(self, pod: PodView, lookup: ObjectLookup, token: TokenSource | None) -> VolumeSetup:
        """Bring every volume of `pod` up to date; failures are collected, never raised.

        No host or pod IP: the volume downward API exposes only metadata fields (status.* is
        env-only upstream)."""
        ctx = Context(
            pod,
            lookup,
            token,
            self.make_pod_dir(pod.uid),
            self.allocatable,
            tmpfs_size=self._tmpfs_size(pod) if self.mount else None,
            owned=self._owned.setdefault(pod.uid, set()),
        )
        result = VolumeSetup(
            subpath_staging=self.pod_dir(pod.uid) if self.mount else None,
            fs_group=pod.fs_group,
        )
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

    def teardown(self, pod_uid: str) -> bool:
        """Unmount everything under the pod's directory (tmpfs volumes, subPath binds), then
        remove its volumes; hostPath targets are the node's, left alone.

        False if a mount is still there: nothing is removed then, since removing files through
        a bind mount would remove the node's own; the error is logged with the paths left.
        """
        pod_dir = self.pod_dir(pod_uid)
        log = get_logger("kubelet_sim.volumes", uid=pod_uid)
        for point in mount_points_under(pod_dir):
            try:
                unmount(point)
            except OSError as exc:
                log.warning("unmount failed", path=str(point), error=str(exc))
        left = mount_points_under(pod_dir)
        if left:
            log.error("mounts left under the pod directory", paths=[str(p) for p in left])
            return False
        remove_tree(self.volumes_dir(pod_uid))
        self._owned.pop(pod_uid, None)
        return True

    def _tmpfs_size(self, pod: PodView) -> int:
        """The node's memory, or the pod's memory limit if every container has one and it is
        smaller (calculateEmptyDirMemorySize)."""
        limits = [
            ((c.raw.get("resources") or {}).get("limits") or {}).get("memory")
            for c in pod.containers
        ]
        if not limits or any(limit is None for limit in limits):
            return self.memory_bytes
        return min(self.memory_bytes, sum(value(str(limit)) for limit in limits))


def _setup_one(ctx: Context, name: str, volume: dict[str, Any]) -> Prepared:
    try:
        safe_part(name)
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
