"""Container log rotation as the kubelet's: 5 files of 10 MiB by default, json-file in Docker.

The kubelet rotates container logs itself (`containerLogMaxSize`, `containerLogMaxFiles`); with
Docker the engine's json-file driver does the same when created with `max-size`/`max-file`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubelet_sim.formats.quantity import value
from kubelet_sim.validation import ConfigError

MI = 1024 * 1024


@dataclass(frozen=True)
class LogRotation:
    max_size_bytes: int = 10 * MI
    max_files: int = 5

    @classmethod
    def parse(cls, max_size: str, max_files: int) -> LogRotation:
        """From the kubelet's flags (`10Mi`, 5); a ConfigError says what is wrong, in one line.

        The size is a quantity, read as the kubelet reads containerLogMaxSize (the one parser,
        kubelet_sim.formats.quantity), in whole bytes rounded up."""
        try:
            size = value(max_size)
        except ValueError:
            size = 0
        if size <= 0:
            raise ConfigError(
                f"invalid --container-log-max-size {max_size!r}: want a size such as 10Mi"
            )
        if max_files < 2:
            raise ConfigError(f"--container-log-max-files ({max_files}) must be greater than 1")
        return cls(size, max_files)

    def log_config(self) -> dict[str, Any]:
        """HostConfig.LogConfig; Docker reads `10m` as 10 MiB (binary units, like `Mi`)."""
        size = self.max_size_bytes
        text = (
            f"{size // MI}m"
            if size % MI == 0
            else f"{size // 1024}k"
            if size % 1024 == 0
            else str(size)
        )
        return {"Type": "json-file", "Config": {"max-size": text, "max-file": str(self.max_files)}}
