"""The agent's settings, as parsed from the command line and KUBELET_SIM_* variables."""

from __future__ import annotations

import re

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
DNS1123_SUBDOMAIN_MAX_LENGTH = 253


# The kubelet release whose behaviour we follow: the Node's kubeletVersion and the probes'
# User-Agent (kube-probe/<major>.<minor>) say it.
KUBELET_COMPAT_VERSION = "v1.34.0"


class ConfigError(ValueError):
    """A setting that can never work; reported as one line before anything starts."""


def is_dns1123_subdomain(text: str) -> bool:
    """apimachinery's IsDNS1123Subdomain: lowercase letters, digits, '-' and '.', each label
    starting and ending with a letter or digit, at most 253 characters. The one copy of it."""
    return len(text) <= DNS1123_SUBDOMAIN_MAX_LENGTH and bool(_DNS1123_SUBDOMAIN.match(text))


def validate_node_name(name: str) -> None:
    """Node names are DNS-1123 subdomains; the API server would refuse anything else."""
    if not is_dns1123_subdomain(name):
        raise ConfigError(
            f"invalid node name {name!r}: use lowercase letters, digits, '-' and '.',"
            " starting and ending with a letter or digit (at most 253 characters)"
        )
