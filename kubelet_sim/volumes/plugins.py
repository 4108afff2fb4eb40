"""One function per volume type: make the volume's directory right and say how to mount it.

Directory names follow the kubelet's plugin names, so `<root>/pods/<uid>/volumes` reads alike.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.quantity import value
from kubelet_sim.logs import get_logger
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.spec import PodView
from kubelet_sim.volumes.atomic_writer import FileProjection, write_atomic
from kubelet_sim.volumes.downward import aggregate, downward_payload
from kubelet_sim.volumes.hostmount import mount_tmpfs
from kubelet_sim.volumes.objects import (
    CONFIG_MAP,
    SECRET,
    Payload,
    config_map_payload,
    fetch,
    mode_of,
    secret_payload,
)
from kubelet_sim.volumes.ownership import MAX_DEPTH, set_volume_ownership
from kubelet_sim.volumes.types import MountError, ObjectLookup, Prepared, TokenSource

DEFAULT_TOKEN_EXPIRATION = 3600  # the API server's default for serviceAccountToken projections


@dataclass(frozen=True)
class Context:
    """What every plugin may use for one pod's setup pass."""

    pod: PodView
    lookup: ObjectLookup
    token: TokenSource | None
    volumes_dir: Path  # <root>/pods/<uid>/volumes
    allocatable: Allocatable  # the node's: the downward API's unset limits
    tmpfs_size: int | None = None  # bytes; None: this node may not mount, memory volumes on disk
    # The pod's volumes whose ownership this process has set (the volume manager's, per pod):
    # the kubelet sets it when it mounts a volume, not on every sync.
    owned: set[str] = field(default_factory=set)

    def volume_dir(self, plugin: str, name: str, mode: int = 0o755) -> Path:
        path = self.volumes_dir / plugin / name
        path.mkdir(parents=True, exist_ok=True)
        # Whatever the agent's umask; only when the permission bits differ (setupDir's
        # Perm() check), so the setgid an fsGroup left on the directory stays.
        if not os.path.ismount(path) and stat.S_IMODE(os.stat(path).st_mode) & 0o777 != mode:
            os.chmod(path, mode)
        return path

    def memory_dir(self, plugin: str, name: str, size_limit: int | None = None) -> Path:
        """A tmpfs mount on the node that lives as long as the pod's volumes, as the kubelet
        wraps these volumes in an emptyDir of medium Memory (its root 1777 as tmpfs makes it);
        on disk if we may not mount. `size_limit` (an emptyDir's sizeLimit) applies when it
        is smaller (calculateEmptyDirMemorySize)."""
        path = self.volume_dir(plugin, name)
        if self.tmpfs_size is not None and not os.path.ismount(path):
            size = self.tmpfs_size
            if size_limit is not None and 0 < size_limit < size:
                size = size_limit
            try:
                mount_tmpfs(path, size)
            except OSError as exc:
                raise MountError(str(exc)) from exc
        return path


Plugin = Callable[[Context, str, Json], Prepared]


def _owned(ctx: Context, path: Path, name: str, read_only: bool, changed: bool) -> None:
    """Ownership as the kubelet sets it at a mount: once per volume in this process (the
    volume manager remembers), and again after the content changed (our own files)."""
    group = ctx.pod.fs_group
    if group is None or (name in ctx.owned and not changed):
        return
    policy = (ctx.pod.spec.get("securityContext") or {}).get("fsGroupChangePolicy")
    try:
        walked = set_volume_ownership(path, group, read_only, policy)
    except OSError as exc:
        raise MountError(f"failed to set the volume's ownership to fsGroup {group}: {exc}") from exc
    ctx.owned.add(name)
    if walked is not None and walked.too_deep:
        get_logger("kubelet_sim.volumes").warning(
            "fsGroup not set below the walk's depth limit",
            pod=ctx.pod.full_name,
            volume=name,
            depth=MAX_DEPTH,
        )


def empty_dir(ctx: Context, name: str, source: Json) -> Prepared:
    """World-writable like the kubelet's, so any container user can share it.

    Medium Memory is a tmpfs on the node for the pod's lifetime, as the kubelet's, so its files
    outlive a container's restart; where this process may not mount, a tmpfs that Docker makes
    while a container uses it (files lost at a restart: said once at start)."""
    plugin = "kubernetes.io~empty-dir"
    if source.get("medium") != "Memory":
        path = ctx.volume_dir(plugin, name, 0o777)
    elif ctx.tmpfs_size is None:
        return Prepared(ctx.volume_dir(plugin, name, 0o777), tmpfs=True)
    else:
        path = ctx.memory_dir(plugin, name, _size_limit(source.get("sizeLimit")))
    _owned(ctx, path, name, read_only=False, changed=False)
    return Prepared(path)


def _size_limit(limit: object) -> int | None:
    """An emptyDir's sizeLimit in bytes; one that is no quantity (a static pod's manifest is
    not validated by an API server) fails the mount, never the sync."""
    if limit is None:
        return None
    try:
        return value(str(limit))
    except ValueError as exc:
        raise MountError(f"sizeLimit {limit!r}: {exc}") from exc


def config_map(ctx: Context, name: str, source: Json) -> Prepared:
    optional = bool(source.get("optional"))
    obj = fetch(ctx.lookup, CONFIG_MAP, ctx.pod.namespace, str(source.get("name", "")), optional)
    payload = config_map_payload(obj, _items(source), mode_of(source.get("defaultMode")), optional)
    return _project(ctx, "kubernetes.io~configmap", name, payload)


def secret(ctx: Context, name: str, source: Json) -> Prepared:
    optional = bool(source.get("optional"))
    obj = fetch(ctx.lookup, SECRET, ctx.pod.namespace, str(source.get("secretName", "")), optional)
    payload = secret_payload(obj, _items(source), mode_of(source.get("defaultMode")), optional)
    return _project(ctx, "kubernetes.io~secret", name, payload, memory=True)


def downward_api(ctx: Context, name: str, source: Json) -> Prepared:
    default_mode = mode_of(source.get("defaultMode"))
    payload = downward_payload(ctx.pod, _items(source), default_mode, ctx.allocatable)
    return _project(ctx, "kubernetes.io~downward-api", name, payload, memory=True)


def projected(ctx: Context, name: str, source: Json) -> Prepared:
    """All sources into one directory; every failing source is reported, nothing is written."""
    default_mode = mode_of(source.get("defaultMode"))
    payload: Payload = {}
    errors: list[str] = []
    for projection in source.get("sources") or []:
        try:
            payload.update(_projection(ctx, projection, default_mode))
        except MountError as exc:
            errors.append(str(exc))
    if errors:
        raise MountError(aggregate(errors))
    return _project(ctx, "kubernetes.io~projected", name, payload, memory=True)


def host_path(ctx: Context, name: str, source: Json) -> Prepared:
    """The node's own path, checked (or created) per `type` like the hostPath plugin."""
    path = Path(str(source.get("path", "")))
    _check_host_path(path, str(source.get("type") or ""))
    return Prepared(path)


PLUGINS: dict[str, Plugin] = {
    "emptyDir": empty_dir,
    "configMap": config_map,
    "secret": secret,
    "downwardAPI": downward_api,
    "projected": projected,
    "hostPath": host_path,
}


def _items(source: Json) -> list[Json]:
    return list(source.get("items") or [])


def _project(
    ctx: Context, plugin: str, name: str, payload: Payload, *, memory: bool = False
) -> Prepared:
    path = ctx.memory_dir(plugin, name) if memory else ctx.volume_dir(plugin, name)
    try:
        changed = write_atomic(path, payload)
    except OSError as exc:
        raise MountError(str(exc)) from exc
    if changed:  # names only: the payload may be secret
        get_logger("kubelet_sim.volumes").info(
            "volume content written", pod=ctx.pod.full_name, volume=name, files=len(payload)
        )
    _owned(ctx, path, name, read_only=True, changed=bool(changed))
    return Prepared(path, read_only=True)


def _projection(ctx: Context, projection: Json, default_mode: int) -> Payload:
    namespace = ctx.pod.namespace
    if "configMap" in projection:
        src = projection["configMap"] or {}
        optional = bool(src.get("optional"))
        obj = fetch(ctx.lookup, CONFIG_MAP, namespace, str(src.get("name", "")), optional)
        return config_map_payload(obj, _items(src), default_mode, optional)
    if "secret" in projection:
        src = projection["secret"] or {}
        optional = bool(src.get("optional"))
        obj = fetch(ctx.lookup, SECRET, namespace, str(src.get("name", "")), optional)
        return secret_payload(obj, _items(src), default_mode, optional)
    if "downwardAPI" in projection:
        items = _items(projection["downwardAPI"] or {})
        return downward_payload(ctx.pod, items, default_mode, ctx.allocatable)
    if "serviceAccountToken" in projection:
        return _token_payload(ctx, projection["serviceAccountToken"] or {}, default_mode)
    kinds = ", ".join(sorted(projection)) or "empty"
    raise MountError(f"projected volume source {kinds} is not supported by kubelet-sim")


def _token_payload(ctx: Context, src: Json, default_mode: int) -> Payload:
    """A bound token for the pod's service account; no audience means the API server's."""
    if ctx.token is None:
        raise MountError("no service account token source is configured")
    account = str(ctx.pod.spec.get("serviceAccountName") or "default")
    expiration = int(src.get("expirationSeconds") or DEFAULT_TOKEN_EXPIRATION)
    audiences = [str(src["audience"])] if src.get("audience") else []
    try:
        token = ctx.token(ctx.pod.namespace, account, expiration, audiences)
    except Exception as exc:  # the token source's error is the FailedMount message
        raise MountError(str(exc)) from exc
    return {str(src.get("path", "")): FileProjection(token.encode(), default_mode)}


_HOST_PATH_CHECKS: dict[str, tuple[Callable[[int], bool], str]] = {
    "Directory": (stat.S_ISDIR, "a directory"),
    "DirectoryOrCreate": (stat.S_ISDIR, "a directory"),
    "File": (stat.S_ISREG, "a file"),
    "FileOrCreate": (stat.S_ISREG, "a file"),
    "Socket": (stat.S_ISSOCK, "a socket file"),
    "CharDevice": (stat.S_ISCHR, "a character device"),
    "BlockDevice": (stat.S_ISBLK, "a block device"),
}


def _check_host_path(path: Path, kind: str) -> None:
    if kind == "":
        return  # no check, as upstream
    try:
        if kind == "DirectoryOrCreate" and not path.exists():
            path.mkdir(mode=0o755, parents=True)
        elif kind == "FileOrCreate" and not path.exists():
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.touch(mode=0o644)
    except OSError as exc:
        raise MountError(str(exc)) from exc
    check = _HOST_PATH_CHECKS.get(kind)
    if check is None:
        raise MountError(f"{kind} is an invalid volume type")
    predicate, what = check
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = 0
    if not predicate(mode):
        raise MountError(f"hostPath type check failed: {path} is not {what}")
