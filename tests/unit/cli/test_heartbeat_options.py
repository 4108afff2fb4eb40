"""The kubelet's heartbeat settings as options: what relieves an API server of many nodes."""

from __future__ import annotations

import pytest

from kubelet_sim.cli.node_options import NodeOptions
from kubelet_sim.validation import ConfigError


def test_the_kubelets_defaults() -> None:
    settings = NodeOptions().node_settings("n1", kubelet_port=10250)
    assert settings.lease_duration_seconds == 40
    assert settings.lease_renew_interval == 10.0
    assert settings.status_update_interval == 10.0
    assert settings.status_report_interval == 300.0


def test_a_longer_lease_is_renewed_every_quarter_of_it() -> None:
    options = NodeOptions(
        node_lease_duration_seconds=120,
        node_status_update_frequency="20s",
        node_status_report_frequency="10m",
    )
    settings = options.node_settings("n1", kubelet_port=10250)
    assert settings.lease_duration_seconds == 120
    assert settings.lease_renew_interval == 30.0
    assert settings.status_update_interval == 20.0
    assert settings.status_report_interval == 600.0


def test_a_bad_duration_names_its_option() -> None:
    with pytest.raises(ConfigError, match="--node-status-report-frequency"):
        NodeOptions(node_status_report_frequency="often").node_settings("n1", kubelet_port=1)
