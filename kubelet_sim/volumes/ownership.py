"""SetVolumeOwnership (volume_linux.go): a volume's files get the pod's fsGroup.

Every file and directory gets the group and group read (and write unless the volume is
read-only); directories get setgid, so what the containers create later keeps the group.
Symlinks keep their mode. The kubelet does this when it mounts a volume, once per mount, not on
every sync; with `fsGroupChangePolicy: OnRootMismatch` it skips the walk when the root already
has the group, the bits and setgid (skipPermissionChange).

A running container can swap an entry for a symlink while we walk, so nothing here is changed
by a path that could be re-resolved: each entry is pinned by an O_PATH descriptor opened without
following it (relative to its parent's pinned descriptor), changed through /proc/self/fd (that
inode, whatever its name now leads to), and a symlink only has its own group changed
(fchownat with AT_SYMLINK_NOFOLLOW in the pinned parent). The walk keeps its own stack (a pod
can make a tree deeper than Python's recursion allows), one descriptor per level, and goes no
deeper than MAX_DEPTH levels (the descriptors a walk may hold at once).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

RW_MASK, RO_MASK, EXEC_MASK = 0o660, 0o440, 0o110
ON_ROOT_MISMATCH = "OnRootMismatch"
MAX_DEPTH = 4096


@dataclass
class Walked:
    """What one walk did: entries changed, and whether it stopped at MAX_DEPTH somewhere."""

    entries: int = 0
    too_deep: list[str] = field(default_factory=list)


def needs_change(path: Path, group: int, read_only: bool) -> bool:
    """requiresPermissionChange: the root lacks the group, the bits or setgid."""
    info = os.stat(path)
    if info.st_gid != group or not stat.S_ISDIR(info.st_mode):
        return True
    wanted = (RO_MASK if read_only else RW_MASK) | EXEC_MASK
    return (stat.S_IMODE(info.st_mode) & wanted) != wanted or not info.st_mode & stat.S_ISGID


def set_volume_ownership(
    path: Path, group: int, read_only: bool, policy: str | None = None
) -> Walked | None:
    """The walk (None when OnRootMismatch found nothing to change at the root)."""
    if policy == ON_ROOT_MISMATCH and not needs_change(path, group, read_only):
        return None
    mask = RO_MASK if read_only else RW_MASK
    root = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = Walked()
    # Each frame: a directory's pinned descriptor and the names in it not yet seen.
    stack: list[tuple[int, list[str]]] = []
    try:
        stack.append((root, _enter(root, group, mask, walked)))
        while stack:
            parent, names = stack[-1]
            if not names:
                stack.pop()
                if parent != root:
                    os.close(parent)
                continue
            name = names.pop()
            try:
                child = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            except FileNotFoundError:
                continue  # removed by the container meanwhile
            kind = os.fstat(child).st_mode
            if stat.S_ISDIR(kind) and len(stack) < MAX_DEPTH:
                try:
                    stack.append((child, _enter(child, group, mask, walked)))
                except BaseException:
                    os.close(child)
                    raise
                continue
            try:
                _own_entry(parent, name, child, kind, group, mask, walked)
            finally:
                os.close(child)
    finally:
        for parent, _names in stack:
            if parent != root:
                os.close(parent)
        os.close(root)
    return walked


def _own_entry(
    parent: int, name: str, child: int, kind: int, group: int, mask: int, walked: Walked
) -> None:
    """One entry not descended into: a symlink (its own group), a file, or a directory at
    MAX_DEPTH (itself only)."""
    if stat.S_ISLNK(kind):
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            os.chown(name, -1, group, dir_fd=parent, follow_symlinks=False)
    elif stat.S_ISDIR(kind):
        _own(child, group, mask | stat.S_ISGID | EXEC_MASK)
        walked.too_deep.append(name)
    else:
        _own(child, group, mask)
    walked.entries += 1


def _enter(pinned: int, group: int, mask: int, walked: Walked) -> list[str]:
    """Own a directory, then list it (through its pinned descriptor, never by name)."""
    _own(pinned, group, mask | stat.S_ISGID | EXEC_MASK)
    walked.entries += 1
    listing = os.open(f"/proc/self/fd/{pinned}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.listdir(listing)
    finally:
        os.close(listing)


def _own(pinned: int, group: int, extra: int) -> None:
    """Group and mode of the very inode `pinned` holds (its /proc/self/fd link is not a name
    that a container can redirect)."""
    through = f"/proc/self/fd/{pinned}"
    os.chown(through, -1, group)
    os.chmod(through, stat.S_IMODE(os.stat(through).st_mode) | extra)
