"""Path safety, in one place: names from the API (uids, container and volume names, profile
file names) must never reach outside the directory they are joined to, and a directory root
acts in must be one nobody else could have planted files or symlinks in."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path


class UnsafePath(ValueError):
    """A path part or a resolved path that would leave its base directory."""


def safe_part(part: str) -> str:
    """One path component: refuse anything that could escape (empty, `.`, `..`, a slash)."""
    if not part or part in (".", "..") or "/" in part or "\0" in part:
        raise UnsafePath(f"unsafe path component {part!r}")
    return part


def resolve_within(base: Path, path: Path, what: str = "path") -> Path:
    """`path` with its symlinks resolved, relative to `base` (itself resolved); UnsafePath when
    it lands outside. Symlinks that stay inside are fine (a configMap key is one)."""
    resolved = Path(os.path.realpath(path))
    if resolved != base and base not in resolved.parents:
        raise UnsafePath(f"{what} {str(resolved)!r} not within {str(base)!r}")
    return resolved.relative_to(base)


def make_dir(path: Path, mode: int) -> Path:
    """`path` (its parent must exist) with exactly `mode`, whatever the umask (the pod
    directories the volume manager and the runtime's pod files share)."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=mode)
    if (path.stat().st_mode & 0o7777) != mode:
        os.chmod(path, mode)
    return path


def own_directory(path: Path) -> None:
    """Refuse (UnsafePath) a directory someone else could have written in: a symlink, one owned
    by another user than this process's, or one writable by its group or others. Whatever
    such a directory holds (a record naming a process, a symlink where a file goes) may be
    planted, and root acting on it would act for whoever planted it."""
    try:
        found = os.lstat(path)
    except OSError as exc:
        raise UnsafePath(f"{path}: {exc.strerror}") from None
    if not stat.S_ISDIR(found.st_mode):
        raise UnsafePath(f"{path} is not a directory (a symlink is refused too)")
    if found.st_uid != os.geteuid():
        raise UnsafePath(f"{path} belongs to uid {found.st_uid}, not to uid {os.geteuid()}")
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(found.st_mode)
        raise UnsafePath(f"{path} is writable by others (mode {mode:04o})")


def open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """`os.open` that refuses a symlink at `path` itself (ELOOP): a link planted where a file
    goes must not send a write, or a read, anywhere else."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def open_to_others(st: os.stat_result) -> str | None:
    """Why a user other than this process's (or root) could change the file or directory
    `st` describes: another owner, or a group- or world-writable mode. None if nobody can."""
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def others_may_change(path: Path) -> str | None:
    """Why another user could change what `path` holds (a file, or a directory's entries):
    `path` itself, then each directory above it, where the sticky bit (as /tmp has it) is
    enough, since others may then rename nothing of ours. None when nobody else can."""
    resolved = Path(os.path.realpath(path))
    for at in (resolved, *resolved.parents):
        st = os.stat(at)
        why = open_to_others(st)
        sticky = st.st_mode & stat.S_ISVTX and st.st_uid in (0, os.geteuid())
        if why is not None and (at == resolved or not sticky):
            return f"{at} is {why}"
    return None


def bind_target_problem(path: str) -> str | None:
    """Why `path` cannot be a bind target inside a container: Docker reads a `:` in a bind as
    the start of its options, so a mountPath with one could make a mount read-write or shared."""
    if not path.startswith("/"):
        return "must be an absolute path"
    if ":" in path or "\0" in path:
        return "must not contain ':'"
    return None


def remove_tree(path: Path) -> bool:
    """`path` and everything below it removed, however deep a pod made it (shutil.rmtree
    recurses once per level: a 2,000-level tree raises RecursionError, which ignore_errors does
    not catch), never crossing into another filesystem (a mount left below stays, and the
    directories above it). True when it is gone."""
    if not os.path.lexists(path):
        return True
    subprocess.run(
        ["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, check=False
    )
    return not os.path.lexists(path)
