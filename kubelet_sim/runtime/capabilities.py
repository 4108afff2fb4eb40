"""What a privileged container can get from this engine, learned once per engine."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from structlog.stdlib import BoundLogger

from kubelet_sim import cri
from kubelet_sim.runtime import privileged


class EngineCapabilities:
    """The engine's capability bounding set, read once (None: unknown, Docker's flag is
    used), and the capabilities this engine refused by name (Docker 20.10 has no
    CAP_PERFMON): the same for every node on it."""

    def __init__(self, api: Any, log: BoundLogger) -> None:
        self._api = api
        self._log = log
        self._lock = threading.Lock()
        self._mask: int | None = None
        self._read = False
        self._unknown: set[str] = set()

    def privileged_parts(self) -> privileged.PrivilegedParts | None:
        """What a privileged container gets here: None (Docker's `Privileged: true`) where the
        engine holds every capability of its kernel or its set is unknown; else the engine's
        capabilities that Docker can name, the host's devices and no confinement (containerd's
        privileged), since runc cannot give a container what the engine lacks."""
        with self._lock:
            if not self._read:
                self._read = True
                adapter = getattr(self._api, "_custom_adapter", None)
                path = getattr(adapter, "socket_path", None)
                self._mask = privileged.engine_bounding_set(path) if isinstance(path, str) else None
                self._log.info(
                    "engine capability bounding set",
                    cap_bnd=None if self._mask is None else f"{self._mask:016x}",
                )
            mask, unknown = self._mask, frozenset(self._unknown)
        kernel = privileged.kernel_capabilities()
        if mask is None or mask & kernel == kernel:
            return None
        return privileged.PrivilegedParts(
            privileged.capability_names(mask & kernel, unknown), privileged.host_devices()
        )

    def create(
        self,
        create: Callable[[dict[str, Any]], str],
        body: dict[str, Any],
        rebuild: Callable[[], dict[str, Any]],
        log: BoundLogger,
    ) -> str:
        """`create(body)`; a capability this engine has no name for is left out and the create
        retried with `rebuild()` (learned once per engine), as the engine cannot grant it."""
        while True:
            try:
                return create(body)
            except cri.ContainerStartError as exc:
                match = privileged.UNKNOWN_CAPABILITY.search(str(exc))
                caps = (body.get("HostConfig") or {}).get("CapAdd") or ()
                if match is None or f"CAP_{match.group(1)}" not in caps:
                    raise
                with self._lock:
                    if match.group(1) in self._unknown:
                        raise
                    self._unknown.add(match.group(1))
                log.info("engine does not know a capability", capability=match.group(1))
                body = rebuild()
