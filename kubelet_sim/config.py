"""The agent's settings, as parsed from the command line and KUBELET_SIM_* variables."""

from __future__ import annotations

import re

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


# The kubelet release whose behaviour we follow: the Node's kubeletVersion and the probes'
# User-Agent (kube-probe/<major>.<minor>) say it.
KUBELET_COMPAT_VERSION = "v1.34.0"


class ConfigError(ValueError):
    """A setting that can never work; reported as one line before anything starts."""


def validate_node_name(name: str) -> None:
    """Node names are DNS-1123 subdomains; the API server would refuse anything else."""
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        raise ConfigError(
            f"invalid node name {name!r}: use lowercase letters, digits, '-' and '.',"
            " starting and ending with a letter or digit (at most 253 characters)"
        )
