"""The tests' real control plane: the package's own (`kubelet_sim.controlplane`), in a
temporary directory, with controller-manager and scheduler when their binaries are there.

Binaries come from `KUBEBUILDER_ASSETS` (envtest's convention), `KUBELET_SIM_KUBE_BIN`, the
demo's download cache or PATH (etcd: Debian's `etcd-server`).

`python -m tests.kubeenv [NODE...]` runs one by hand and prints where its admin kubeconfig is.
"""

from __future__ import annotations

import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kubelet_sim.controlplane import binaries
from kubelet_sim.controlplane.binaries import Binaries, BinariesMissing
from kubelet_sim.controlplane.cluster import ControlPlane

KubeEnvError = BinariesMissing

__all__ = ["Binaries", "KubeEnv", "KubeEnvError", "find_binaries"]


def find_binaries() -> Binaries:
    """kube-apiserver and etcd at least: the tests run without the controllers if need be."""
    return binaries.find_binaries(require_controllers=False)


@dataclass
class KubeEnv(ControlPlane):
    """A control plane in a fresh temporary directory (removed by `stop()`)."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kubeenv-")))


def main() -> None:
    """Run a control plane until Ctrl-C, for trying the agent by hand."""
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # sigwait needs them blocked
    env = KubeEnv(find_binaries()).start()
    print(f"export KUBECONFIG={env.admin_kubeconfig}  # {', '.join(env.components)}", flush=True)
    for name in sys.argv[1:]:
        print(f"{name}: --kubeconfig {env.node_kubeconfig(name)}", flush=True)
    try:
        signal.sigwait(stop_signals)
    finally:
        env.stop()


if __name__ == "__main__":
    main()
