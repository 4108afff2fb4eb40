"""A volumeMount's subPath, resolved as the kubelet's safe subpath does (subpath_linux.go).

A container may plant symlinks in a volume it shares with the next container. Checking a path and
then handing the same path to Docker leaves a window in which a component can be swapped for a
symlink that leads out of the volume. So: resolve the subPath, refuse it if it leads outside, open
every component of the result from the volume's root with O_NOFOLLOW (a symlink swapped in since
then is refused), and bind-mount the opened object, through /proc/self/fd, onto a staging path
under the pod's directory (`volume-subpaths/<volume>/<container>/<index>`); Docker mounts that.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kubelet_sim.linux.safe_paths import UnsafePath, resolve_within, safe_part
from kubelet_sim.logs import get_logger
from kubelet_sim.volumes.hostmount import bind_mount_fd, mount_points_under, unmount
from kubelet_sim.volumes.types import VolumeError

SUBPATHS_DIR = "volume-subpaths"
_OPEN_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeSubPath(Exception):
    """The subPath leads outside its volume, or through a symlink while being opened."""


def prepare_sub_path(
    volume: Path,
    sub_path: str,
    *,
    volume_name: str,
    container: str,
    index: int,
    staging: Path | None,
) -> Path:
    """The host path Docker must mount for this subPath; VolumeError with the kubelet's text.

    With `staging` (the pod's dir, when we may mount) the result is a bind mount of what was
    opened; without it, the checked path itself (the race the mount closes stays open).
    """
    if os.path.isabs(sub_path):
        raise VolumeError(f"error SubPath `{sub_path}` must not be an absolute path")
    if ".." in Path(sub_path).parts:
        raise VolumeError(f"unable to provision SubPath `{sub_path}`: must not contain '..'")
    base = Path(os.path.realpath(volume))
    log = get_logger("kubelet_sim.volumes", volume=volume_name, container=container)
    if not os.path.exists(volume / sub_path):  # as PathExists: a symlink counts by its target
        try:
            _safe_make_dir(base, sub_path)
        except (OSError, UnsafeSubPath) as exc:
            log.error("cannot create the subPath directory", error=str(exc))
            raise VolumeError(
                f'failed to create subPath directory for volumeMount "{volume_name}" of'
                f' container "{container}"'
            ) from exc
    try:
        relative = resolve_within(base, volume / sub_path, "subpath")
        fd = safe_open(base, relative)
        try:
            if staging is None:
                return base / relative
            target = staging / SUBPATHS_DIR / safe_part(volume_name) / safe_part(container)
            target = target / str(index)
            _bind(fd, target)
            return target
        finally:
            os.close(fd)
    except (OSError, UnsafeSubPath, UnsafePath) as exc:
        # The detail names host paths: it goes to the node's log only, as upstream.
        log.error("cannot prepare the subPath", error=str(exc))
        raise VolumeError(
            f'failed to prepare subPath for volumeMount "{volume_name}" of container "{container}"'
        ) from exc


def safe_open(base: Path, relative: Path) -> int:
    """An O_PATH fd of `base/relative`, opened one component at a time without following
    symlinks (doSafeOpen); the caller closes it."""
    fd = os.open(base, _OPEN_FLAGS | os.O_DIRECTORY)
    try:
        for part in relative.parts:
            child = os.open(part, _OPEN_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise UnsafeSubPath(f"unexpected symlink found {part!r} in the subPath")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _safe_make_dir(base: Path, sub_path: str) -> None:
    """doSafeMakeDir: the missing components, made relative to opened parents (no symlink is
    followed), with the volume's mode as the kubelet gives them."""
    mode = stat.S_IMODE(base.stat().st_mode)
    fd = os.open(base, _OPEN_FLAGS | os.O_DIRECTORY)
    try:
        for part in Path(sub_path).parts:
            try:
                child = os.open(part, _OPEN_FLAGS | os.O_DIRECTORY, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, mode, dir_fd=fd)
                child = os.open(part, _OPEN_FLAGS | os.O_DIRECTORY, dir_fd=fd)
                os.chmod(f"/proc/self/fd/{child}", mode)  # mkdir applied the umask
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def _bind(fd: int, target: Path) -> None:
    """Bind `fd`'s object onto `target`, reusing a mount of the same object from an earlier
    start of the container (doBindSubPath)."""
    opened = os.fstat(fd)
    if target in mount_points_under(target):
        current = target.stat()
        if (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino):
            return
        unmount(target)
    target.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    is_dir = stat.S_ISDIR(opened.st_mode)
    if target.is_dir() != is_dir or not target.exists():
        if target.is_dir():
            target.rmdir()
        else:
            target.unlink(missing_ok=True)
        if is_dir:
            target.mkdir(mode=0o750)
        else:
            target.touch(mode=0o640)
    bind_mount_fd(fd, target)
