"""The tests' real control plane: the package's own (`kubelet_sim.controlplane`), in a
temporary directory, with controller-manager and scheduler when their binaries are there.

Binaries come from `KUBEBUILDER_ASSETS` (envtest's convention), `KUBELET_SIM_KUBE_BIN`, the
demo's download cache or PATH (etcd: Debian's `etcd-server`).

`python -m tests.kubeenv [NODE...]` runs one by hand and prints where its admin kubeconfig is;
`--otherwise` starts it configured as the tests' own is not (`OTHERWISE`), and
`scripts/test-other-cluster` runs the suite against such a one, as against a user's cluster.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubelet_sim.controlplane import binaries
from kubelet_sim.controlplane.binaries import Binaries, BinariesMissing
from kubelet_sim.controlplane.cluster import ControlPlane

KubeEnvError = BinariesMissing

__all__ = ["OTHERWISE", "Binaries", "KubeEnv", "KubeEnvError", "find_binaries"]

# A control plane set up otherwise than the tests' own, as a user's may be: the API server's
# default address preference (Hostname first), the controller-manager's default controller set
# with a ServiceAccount per controller (as kubeadm) and k3s's Service range; `--otherwise` adds
# a DaemonSet shaped like kind's kindnet (`KINDNET_LIKE`), whose pod every node gets.
OTHERWISE: dict[str, Any] = {
    "preferred_address_types": None,
    "controller_list": None,
    "controller_credentials": True,
    "service_cidr": "10.43.0.0/16",
    "scheduler": True,
}


# kind's kindnet as the virtual nodes see it: tolerates every taint, host network, NET_ADMIN;
# its image is never pulled (the tests reach no registry) and is not there to run.
KINDNET_LIKE: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "kindnet", "namespace": "kube-system", "labels": {"app": "kindnet"}},
    "spec": {
        "selector": {"matchLabels": {"app": "kindnet"}},
        "template": {
            "metadata": {"labels": {"app": "kindnet"}},
            "spec": {
                "hostNetwork": True,
                "tolerations": [{"operator": "Exists"}],
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "kindnet-cni",
                        "image": "kubelet-sim.local/kindnetd:absent",
                        "imagePullPolicy": "Never",
                        "securityContext": {"capabilities": {"add": ["NET_RAW", "NET_ADMIN"]}},
                    }
                ],
            },
        },
    },
}


def add_kindnet_like(env: ControlPlane) -> None:
    """Create `KINDNET_LIKE` in kube-system through the admin kubeconfig."""
    from kubelet_sim.kube.client import connect
    from kubelet_sim.kube.rest import request_json

    api = connect(str(env.admin_kubeconfig)).api
    try:
        request_json(api, "POST", "/apis/apps/v1/namespaces/kube-system/daemonsets", KINDNET_LIKE)
    finally:
        api.close()


def find_binaries() -> Binaries:
    """kube-apiserver and etcd at least: the tests run without the controllers if need be."""
    return binaries.find_binaries(require_controllers=False)


@dataclass
class KubeEnv(ControlPlane):
    """A control plane in a fresh temporary directory (removed by `stop()`)."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kubeenv-")))


def main() -> None:
    """Run a control plane until Ctrl-C, for trying the agent by hand."""
    parser = argparse.ArgumentParser(prog="python -m tests.kubeenv", description=main.__doc__)
    parser.add_argument("nodes", nargs="*", metavar="NODE", help="print a kubelet's kubeconfig")
    parser.add_argument(
        "--otherwise", action="store_true", help="set up otherwise than the tests' own (OTHERWISE)"
    )
    parser.add_argument(
        "--controllers", metavar="LIST", help="kube-controller-manager's --controllers"
    )
    parser.add_argument("--no-scheduler", action="store_true", help="start no kube-scheduler")
    args = parser.parse_args()
    options = dict(OTHERWISE) if args.otherwise else {}
    if args.controllers is not None:
        options["controller_list"] = args.controllers
    if args.no_scheduler:
        options["scheduler"] = False
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # sigwait needs them blocked
    env = KubeEnv(find_binaries(), **options).start()
    if args.otherwise:
        add_kindnet_like(env)
    print(f"export KUBECONFIG={env.admin_kubeconfig}  # {', '.join(env.components)}", flush=True)
    if options:
        shown = [f"{k}={v!r}" for k, v in options.items()]
        shown += ["a kindnet-like DaemonSet"] if args.otherwise else []
        print("# " + ", ".join(shown), flush=True)
    for name in args.nodes:
        print(f"{name}: --kubeconfig {env.node_kubeconfig(name)}", flush=True)
    try:
        signal.sigwait(stop_signals)
    finally:
        env.stop()


if __name__ == "__main__":
    main()
