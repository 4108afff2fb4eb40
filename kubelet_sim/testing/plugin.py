"""The pytest plugin (entry point `pytest11: kubelet_sim`): a cluster for a controller's tests.

Fixtures:
- `kubelet_sim_cluster` (session): a started `kubelet_sim.testing.Cluster`, torn down at the
  end of the session (a failing test too);
- `kubelet_sim_namespace` (function): the name of a fresh namespace whose `default`
  ServiceAccount exists, deleted after the test.

Options: `--kubelet-sim-nodes N` (2), `--kubelet-sim-keep` (at the end of the session, keep the
cluster up until Ctrl-C, its kubeconfig printed), `--kubelet-sim-kube-bin DIR`,
`--kubelet-sim-kube-version X.Y.Z` (from the download cache; default the demo's, v1.34),
`--kubelet-sim-kubeconfig PATH` (join that cluster, kind's for example, instead of starting a
control plane) with `--kubelet-sim-context NAME` and `--kubelet-sim-docker-network NAME`.

Loaded in every pytest session of a project that installed kubelet-sim: nothing happens, and
nothing heavy is imported, unless a test asks for a fixture.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kubelet_sim.testing.cluster import Cluster


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kubelet-sim", "kubelet-sim cluster (kubelet_sim_cluster fixture)")
    group.addoption(
        "--kubelet-sim-nodes",
        type=int,
        default=2,
        metavar="N",
        help="Nodes of the kubelet_sim_cluster fixture's cluster (default 2).",
    )
    group.addoption(
        "--kubelet-sim-keep",
        action="store_true",
        default=False,
        help="At the end of the session, keep the cluster up until Ctrl-C (kubeconfig printed).",
    )
    group.addoption(
        "--kubelet-sim-kube-bin",
        type=Path,
        default=None,
        metavar="DIR",
        help="Where kube-apiserver, kube-controller-manager, kube-scheduler (etcd, kubectl)"
        " are; also searched: $KUBEBUILDER_ASSETS, kubelet-sim's download cache, PATH.",
    )
    group.addoption(
        "--kubelet-sim-kube-version",
        default=None,
        metavar="X.Y.Z",
        help="The Kubernetes version taken from kubelet-sim's download cache (default: the"
        " demo's); a --kubelet-sim-kube-bin directory is taken as it is.",
    )
    group.addoption(
        "--kubelet-sim-kubeconfig",
        type=Path,
        default=None,
        metavar="PATH",
        help="Join the cluster of this kubeconfig (kind's, for example) with the nodes instead"
        " of starting a control plane; its Node objects are deleted at the end.",
    )
    group.addoption(
        "--kubelet-sim-context",
        default=None,
        metavar="NAME",
        help="The context of --kubelet-sim-kubeconfig to use (default: its current one).",
    )
    group.addoption(
        "--kubelet-sim-docker-network",
        default=None,
        metavar="NAME",
        help="The Docker network of the nodes' pods (default: bridge; joining a cluster, kind"
        " if Docker has it): the joined cluster's API server must reach this host there.",
    )


def _tell(config: pytest.Config, line: str) -> None:
    """A line on the terminal, past pytest's capture."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        print(line, flush=True)
        return
    with capture.global_and_fixture_disabled():
        print(line, flush=True)


@pytest.fixture(scope="session")
def kubelet_sim_cluster(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    """A started `Cluster` for the whole session (`--kubelet-sim-nodes` nodes; the cluster of
    `--kubelet-sim-kubeconfig` joined, if given), torn down at its end, after a failing test
    too."""
    from kubelet_sim.testing.cluster import Cluster  # noqa: PLC0415 (only when used)

    nodes = pytestconfig.getoption("kubelet_sim_nodes")
    keep = pytestconfig.getoption("kubelet_sim_keep")
    began = time.monotonic()
    cluster = Cluster(
        nodes=nodes,
        kube_bin=pytestconfig.getoption("kubelet_sim_kube_bin"),
        kube_version=pytestconfig.getoption("kubelet_sim_kube_version"),
        kubeconfig=pytestconfig.getoption("kubelet_sim_kubeconfig"),
        context=pytestconfig.getoption("kubelet_sim_context"),
        docker_network=pytestconfig.getoption("kubelet_sim_docker_network"),
    )
    with cluster:
        if keep:
            _tell(
                pytestconfig,
                f"\nkubelet-sim: cluster up in {time.monotonic() - began:.1f} s;"
                f" export KUBECONFIG={cluster.kubeconfig}",
            )
        yield cluster
        if keep:
            _tell(
                pytestconfig,
                f"\nkubelet-sim: kept running (--kubelet-sim-keep):"
                f" export KUBECONFIG={cluster.kubeconfig}\nCtrl-C (or SIGTERM) tears it down.",
            )
            _wait_for_ctrl_c()


def _wait_for_ctrl_c() -> None:
    """Until SIGINT or SIGTERM, whatever this process inherited: a pytest started in the
    background of a script ignores SIGINT (the shell's doing), and would never end."""
    import signal  # noqa: PLC0415

    told = threading.Event()
    previous = {s: signal.signal(s, lambda *_: told.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not told.wait(1.0):
            pass
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@pytest.fixture
def kubelet_sim_namespace(kubelet_sim_cluster: Cluster) -> Iterator[str]:
    """The name of a fresh namespace whose `default` ServiceAccount exists (pods need it),
    deleted after the test."""
    from kubelet_sim.testing.cluster import ClusterError  # noqa: PLC0415 (only when used)

    name = f"kst-{secrets.token_hex(4)}"
    kubelet_sim_cluster.create_namespace(name)
    try:
        yield name
    finally:
        with contextlib.suppress(ClusterError):  # the session's end removes the cluster
            kubelet_sim_cluster.delete_namespace(name)
