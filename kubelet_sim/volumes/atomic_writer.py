"""Atomic projection of files into a volume directory, as the kubelet's AtomicWriter does it.

The real files live in a hidden timestamped directory; `..data` is a symlink to it and every
user-visible entry is a symlink into `..data`. An update writes a new timestamped directory and
swaps `..data` with one rename, so a container sees either the old set of files or the new one,
never a mix (pkg/volume/util/atomic_writer.go).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kubelet_sim.volumes.types import MountError

DATA_DIR = "..data"
NEW_DATA_DIR = "..data_tmp"
_MAX_FILE_NAME = 255
_MAX_PATH = 4096


@dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int  # permission bits, e.g. 0o644


def write_atomic(target: Path, payload: Mapping[str, FileProjection]) -> bool:
    """Make `target` show exactly `payload`; True if anything on disk changed."""
    clean = {os.path.normpath(p): f for p, f in _validated(payload).items()}
    old_ts = _read_link(target / DATA_DIR)
    stale: set[str] = set()
    if old_ts is not None:
        stale = _paths_to_remove(clean, target / old_ts)
        if not stale and not _differs(clean, target / old_ts):
            return False
    ts_dir = _new_timestamp_dir(target)
    _write_payload(clean, ts_dir)
    _create_user_visible(target, clean)
    _swap_data_link(target, ts_dir.name)
    for path in stale:
        if os.sep not in path:  # only the root holds user-visible symlinks
            (target / path).unlink(missing_ok=True)
    _remove_old_timestamp_dirs(target, keep=ts_dir.name)
    return True


def _validated(payload: Mapping[str, FileProjection]) -> Mapping[str, FileProjection]:
    """Paths are relative, stay inside the volume, and never use the writer's `..` names."""
    for path in payload:
        if not path:
            raise MountError('invalid path: must not be empty: ""')
        if os.path.isabs(path):
            raise MountError(f"invalid path: must be relative path: {path}")
        if len(path) > _MAX_PATH:
            raise MountError(f"invalid path: must be less than or equal to {_MAX_PATH} characters")
        items = path.split(os.sep)
        if ".." in items:
            raise MountError(f"invalid path: must not contain '..': {path}")
        if any(len(item) > _MAX_FILE_NAME for item in items):
            raise MountError(
                f"invalid path: filenames must be less than or equal to {_MAX_FILE_NAME} characters"
            )
        if items[0].startswith(".."):
            raise MountError(f"invalid path: must not start with '..': {path}")
    return payload


def _read_link(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return None


def _paths_to_remove(payload: Mapping[str, FileProjection], old_ts: Path) -> set[str]:
    """Entries of the current version that the new payload no longer has (dirs included)."""
    current: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(old_ts):
        rel = os.path.relpath(dirpath, old_ts)
        for name in dirnames + filenames:
            current.add(os.path.normpath(os.path.join(rel, name)))
    wanted: set[str] = set()
    for file in payload:
        path = file
        while path:
            wanted.add(path)
            path = os.path.dirname(path)
    return current - wanted


def _differs(payload: Mapping[str, FileProjection], old_ts: Path) -> bool:
    """Whether any file's content or mode differs from what the current version holds."""
    for path, projection in payload.items():
        try:
            current = old_ts / path
            if (current.stat().st_mode & 0o777) != projection.mode:
                return True
            if current.read_bytes() != projection.data:
                return True
        except OSError:
            return True
    return False


def _new_timestamp_dir(target: Path) -> Path:
    """`..2006_01_02_15_04_05.<random>`, 0755 so that any container user can traverse it."""
    prefix = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    ts_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=target))
    os.chmod(ts_dir, 0o755)
    return ts_dir


def _write_payload(payload: Mapping[str, FileProjection], ts_dir: Path) -> None:
    for path, projection in payload.items():
        full = ts_dir / path
        _make_dirs(full.parent, ts_dir)
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, projection.mode)
        try:
            os.write(fd, projection.data)
            os.fchmod(fd, projection.mode)  # open() applied the umask; the spec's mode wins
        finally:
            os.close(fd)


def _make_dirs(path: Path, top: Path) -> None:
    """Nested payload directories, 0755 whatever the umask."""
    if path == top or path.is_dir():
        return
    _make_dirs(path.parent, top)
    path.mkdir()
    os.chmod(path, 0o755)


def _create_user_visible(target: Path, payload: Mapping[str, FileProjection]) -> None:
    """`name -> ..data/name` for each top-level entry: `a/b/c` is reached through `a`."""
    for path in payload:
        top = path.split(os.sep, 1)[0]
        link = target / top
        if not link.is_symlink():
            os.symlink(os.path.join(DATA_DIR, top), link)


def _swap_data_link(target: Path, ts_name: str) -> None:
    """Point `..data` at the new version with rename(2), which replaces the link atomically."""
    tmp = target / NEW_DATA_DIR
    tmp.unlink(missing_ok=True)  # left over from an interrupted write
    os.symlink(ts_name, tmp)
    os.rename(tmp, target / DATA_DIR)


def _remove_old_timestamp_dirs(target: Path, keep: str) -> None:
    """The previous version, and any left behind by an interrupted write."""
    for entry in target.iterdir():
        name = entry.name
        ours = name.startswith("..") and name not in (keep, DATA_DIR, NEW_DATA_DIR)
        if ours and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
