"""Mounts an agent left under a test's directory (pods still running when it stopped)."""

from __future__ import annotations

import shutil
from pathlib import Path

from kubelet_sim.volumes.hostmount import mount_points_under, unmount


def unmount_all_under(directory: Path) -> None:
    for point in mount_points_under(directory):
        unmount(point)


def remove_root(directory: Path) -> None:
    """Unmount, then remove: never remove files through a mount."""
    unmount_all_under(directory)
    if not mount_points_under(directory):
        shutil.rmtree(directory, ignore_errors=True)
