"""The kubelet's log-rotation flags, as Docker's json-file options."""

from __future__ import annotations

import pytest

from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.validation import ConfigError


@pytest.mark.parametrize(
    ("size", "files", "config"),
    [
        ("10Mi", 5, {"max-size": "10m", "max-file": "5"}),
        ("512Ki", 2, {"max-size": "512k", "max-file": "2"}),
        ("1M", 3, {"max-size": "1000000", "max-file": "3"}),
        ("2Gi", 4, {"max-size": "2048m", "max-file": "4"}),
        # any quantity the kubelet's resource.ParseQuantity takes, in bytes rounded up
        ("1.5Mi", 2, {"max-size": "1536k", "max-file": "2"}),
        ("1e6", 2, {"max-size": "1000000", "max-file": "2"}),
        ("10k", 2, {"max-size": "10000", "max-file": "2"}),
    ],
)
def test_sizes_become_docker_options(size: str, files: int, config: dict[str, str]) -> None:
    assert LogRotation.parse(size, files).log_config() == {"Type": "json-file", "Config": config}


@pytest.mark.parametrize(
    ("size", "files"),
    [("ten", 5), ("0", 5), ("10Mi", 1), ("-1Mi", 5), ("10K", 5), ("10MB", 5), ("", 5)],
)
def test_invalid_flags_are_refused(size: str, files: int) -> None:
    with pytest.raises(ConfigError, match="--container-log-max"):
        LogRotation.parse(size, files)
