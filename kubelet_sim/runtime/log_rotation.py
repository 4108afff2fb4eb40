"""Container log rotation as the kubelet's: 5 files of 10 MiB by default, json-file in Docker.

The kubelet rotates container logs itself (`containerLogMaxSize`, `containerLogMaxFiles`); with
Docker the engine's json-file driver does the same when created with `max-size`/`max-file`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kubelet_sim.config import ConfigError

MI = 1024 * 1024
_SUFFIXES = {
    "": 1,
    "k": 1000,
    "K": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "Ki": 1024,
    "Mi": MI,
    "Gi": 1024**3,
}
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|k|K|M|G)?$")


@dataclass(frozen=True)
class LogRotation:
    max_size_bytes: int = 10 * MI
    max_files: int = 5

    @classmethod
    def parse(cls, max_size: str, max_files: int) -> LogRotation:
        """From the kubelet's flags (`10Mi`, 5); a ConfigError says what is wrong, in one line."""
        match = _QUANTITY.match(max_size.strip())
        if match is None or int(match.group(1)) == 0:
            raise ConfigError(
                f"invalid --container-log-max-size {max_size!r}: want a size such as 10Mi"
            )
        if max_files < 2:
            raise ConfigError(f"--container-log-max-files ({max_files}) must be greater than 1")
        return cls(int(match.group(1)) * _SUFFIXES[match.group(2) or ""], max_files)

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
