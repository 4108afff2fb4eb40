"""The Docker engine behind the node: the only place (with its siblings) that imports `docker`."""

from __future__ import annotations

from dataclasses import dataclass

import docker
from docker.errors import DockerException


class RuntimeUnavailable(Exception):
    """The Docker engine does not answer; pods cannot run and the node is not Ready."""


@dataclass
class DockerRuntime:
    """A connected Docker client plus what the node reports about it."""

    client: docker.DockerClient

    @classmethod
    def connect(cls, base_url: str | None = None) -> DockerRuntime:
        """Connect ($DOCKER_HOST or the default socket) and ping, so a dead engine fails fast."""
        try:
            docker_client = (
                docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
            )
            docker_client.ping()
        except DockerException as exc:
            where = base_url or "DOCKER_HOST or unix:///var/run/docker.sock"
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RuntimeUnavailable(f"Docker not reachable at {where}: {reason}") from exc
        return cls(client=docker_client)

    def version(self) -> str:
        """The engine version, as nodeInfo.containerRuntimeVersion wants it (docker://X)."""
        return str(self.client.version().get("Version", "unknown"))

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except DockerException:
            return False

    def close(self) -> None:
        self.client.close()
