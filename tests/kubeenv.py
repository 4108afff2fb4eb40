"""The tests' real control plane: the package's own (`kubelet_sim.controlplane`), in a
temporary directory, with controller-manager and scheduler when their binaries are there.

Binaries come from `KUBEBUILDER_ASSETS` (envtest's convention), `KUBELET_SIM_KUBE_BIN`, the
demo's download cache or PATH (etcd: Debian's `etcd-server`). From the cache, the version
`KUBELET_SIM_TEST_KUBE_VERSION` names (default: the demo's, v1.34): CI runs the real pass on
each supported version.

`python -m tests.kubeenv [NODE...]` runs one by hand and prints where its admin kubeconfig is;
`--otherwise` starts it configured as the tests' own is not (`OTHERWISE`), and
`scripts/test-other-cluster` runs the suite against such a one, as against a user's cluster.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubelet_sim.controlplane import binaries
from kubelet_sim.controlplane.binaries import Binaries, BinariesMissing
from kubelet_sim.controlplane.cluster import ControlPlane
from kubelet_sim.controlplane.reference_node import ReferenceNode, ReferenceNodeError
from tests.server_probes import KUBELET_CLIENT_CA_ENV

KubeEnvError = BinariesMissing

__all__ = ["OTHERWISE", "Binaries", "KubeEnv", "KubeEnvError", "find_binaries", "kube_version"]

# A control plane set up otherwise than the tests' own, as a user's may be: the API server's
# default address preference (Hostname first), the controller-manager's default controller set
# with a ServiceAccount per controller (as kubeadm) and without --root-ca-file, k3s's Service
# range, a token issuer other than kind's (the audience of a token asked without one), a
# static-token admin whose kubeconfig has `insecure-skip-tls-verify` (the one printed) and the
# API server's kubelet-client certificate signed by a CA of its own, which no kubeconfig names.
# `--otherwise` adds a DaemonSet shaped like kind's kindnet (`KINDNET_LIKE`), whose pod every
# node gets, and a real kubelet node (`ReferenceNode`, untainted: the scheduler may pick it for
# any pod) where one can run here.
OTHERWISE: dict[str, Any] = {
    "preferred_address_types": None,
    "controller_list": None,
    "controller_credentials": True,
    "root_ca_file": False,
    "service_cidr": "10.43.0.0/16",
    "service_account_issuer": "https://kubelet-sim.invalid/issuer",
    "scheduler": True,
    "token_user": True,
    "own_kubelet_client_ca": True,
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


KUBE_VERSION_ENV = "KUBELET_SIM_TEST_KUBE_VERSION"


def kube_version() -> str:
    """The Kubernetes version the real pass runs (the variable, else the demo's default)."""
    return os.environ.get(KUBE_VERSION_ENV) or binaries.DEFAULT_KUBE_VERSION


def find_binaries() -> Binaries:
    """kube-apiserver and etcd at least: the tests run without the controllers if need be."""
    return binaries.find_binaries(version=kube_version(), require_controllers=False)


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
    parser.add_argument(
        "--no-reference-node",
        action="store_true",
        help="with --otherwise: no real kubelet node beside (it takes some 10 s and root)",
    )
    parser.add_argument(
        "--no-service-account-admission",
        action="store_true",
        help="the API server without its ServiceAccount admission plugin (no kube-api-access)",
    )
    args = parser.parse_args()
    options = dict(OTHERWISE) if args.otherwise else {}
    if args.controllers is not None:
        options["controller_list"] = args.controllers
    if args.no_scheduler:
        options["scheduler"] = False
    if args.no_service_account_admission:
        options["service_account_admission"] = False
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # sigwait needs them blocked
    env = KubeEnv(find_binaries(), **options).start()
    reference = None
    try:
        shown = [f"{k}={v!r}" for k, v in options.items()]
        if args.otherwise:
            add_kindnet_like(env)
            shown.append("a kindnet-like DaemonSet")
            if not args.no_reference_node:
                reference = _reference_node(env)
                shown.append(
                    f"a real kubelet node {reference.name}"
                    if isinstance(reference, ReferenceNode)
                    else f"no real kubelet node ({reference})"
                )
        if shown:
            print("# " + ", ".join(shown), flush=True)
        if env.own_kubelet_client_ca:
            # What a user tells the suite of such a cluster (tests/cluster.py).
            print(f"export {KUBELET_CLIENT_CA_ENV}={env.client_ca[0]}", flush=True)
        kubeconfig = env.token_kubeconfig() if env.token_user else env.admin_kubeconfig
        # Last: scripts/test-other-cluster reads the lines above once it sees this one.
        print(f"export KUBECONFIG={kubeconfig}  # {', '.join(env.components)}", flush=True)
        for name in args.nodes:
            print(f"{name}: --kubeconfig {env.node_kubeconfig(name)}", flush=True)
        signal.sigwait(stop_signals)
    finally:
        if isinstance(reference, ReferenceNode):
            reference.stop()
        env.stop()


def _reference_node(env: ControlPlane) -> ReferenceNode | str:
    """A Ready upstream kubelet node of `env`, untainted; or why none can run here."""
    why = ReferenceNode.unavailable(env.binaries.kubelet)
    if why:
        return why
    workdir = Path(tempfile.mkdtemp(prefix="ksref-"))  # short: containerd's socket is there
    node = ReferenceNode(
        env, f"ks-kubelet-{secrets.token_hex(3)}", workdir, kubelet=env.binaries.kubelet
    )
    try:
        return node.start()
    except ReferenceNodeError as exc:
        return str(exc).splitlines()[0]


if __name__ == "__main__":
    main()
