"""What the reference node's processes are told, by the kubelet's version: which kubelet
binary, containerd's config.toml, the CNI network list and the kubelet's KubeletConfiguration
and command line.

Kept apart from reference_node.py, which starts the processes and undoes what they did; these
functions only read a node's settings and write its configuration files.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kubelet_sim.controlplane import binaries, host

if TYPE_CHECKING:
    from kubelet_sim.controlplane.cluster import NodeCredentials


class ReferenceNode(Protocol):
    """What these files are made from: reference_node.ReferenceNode, read only (a protocol,
    so the module that starts the node imports this one and not the other way round). Its
    fields are attributes here, of their own types; what it computes, and `labels` (read only
    as a Mapping, where the node holds a dict), are properties."""

    name: str
    workdir: Path
    pause_image: str
    node_ip: str | None
    subnet: ipaddress.IPv4Network | None
    bridge: str
    port: int
    healthz_port: int
    cluster_domain: str
    cluster_dns: Sequence[str]
    static_pod_path: Path | None
    taints: Sequence[str]
    verbosity: int

    @property
    def socket(self) -> Path: ...
    @property
    def network_name(self) -> str: ...
    @property
    def cgroup_root(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


CNI_BIN_DIR = Path("/usr/lib/cni")

# Without it (a sandboxed root, as on this project's machines) runc cannot give a pod's sandbox
# the oom_score_adj -998 the kubelet asks: containerd is then told to keep scores no lower
# than its own (restrict_oom_score_adj, as for rootless).
CAP_SYS_RESOURCE = 24


def find_kubelet(
    env: dict[str, str] | None = None,
    *,
    beside: Path | None = None,
    version: str | None = None,
) -> Path | None:
    """The upstream kubelet: $KUBELET_SIM_KUBELET; then the one `beside` the API server in use
    (the same directory as its kube-apiserver: the same version); then the cache's directory of
    the server's `version` ("v1.34.9", from /version); then where the control plane's binaries
    are looked for ($KUBEBUILDER_ASSETS, $KUBELET_SIM_KUBE_BIN, the download cache, newest
    first), then PATH. A kubelet is never to be newer than its API server (the version skew
    policy): the first two are what a comparison needs."""
    env = dict(os.environ) if env is None else env
    if env.get("KUBELET_SIM_KUBELET"):
        given = Path(env["KUBELET_SIM_KUBELET"])
        return given if given.is_file() else None
    cache = binaries.cache_dir(env)
    dirs = [] if beside is None else [beside.parent]
    numbered = (version or "").lstrip("v").split("+")[0].split("-")[0]
    if numbered and not numbered.startswith("0."):
        dirs.append(cache / numbered)
    dirs += [Path(env[v]) for v in ("KUBEBUILDER_ASSETS", "KUBELET_SIM_KUBE_BIN") if env.get(v)]
    with contextlib.suppress(OSError):
        dirs += sorted((d for d in cache.iterdir() if d.is_dir()), key=_version_order, reverse=True)
    for d in dirs:
        if (d / "kubelet").is_file() and os.access(d / "kubelet", os.X_OK):
            return d / "kubelet"
    found = shutil.which("kubelet", path=env.get("PATH", os.defpath))
    return Path(found) if found else None


def _version_order(directory: Path) -> tuple[int, ...]:
    parts = directory.name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else (-1,)


def kubelet_flags(kubelet: Path) -> set[str]:
    """The long flags the kubelet binary still takes (from its --help): the runtime flags
    v1.24 needs (`--container-runtime remote`) were removed in v1.27, and what replaced them
    lives in the KubeletConfiguration (`containerRuntimeEndpoint`, `imageServiceEndpoint`).
    Read from the binary, not from its --version: a build that stamped no version
    (`v0.0.0-master`, as the rig's v1.24) says nothing by its number."""
    shown = subprocess.run(
        [str(kubelet), "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    words = (shown.stdout + shown.stderr).split()
    return {w for w in words if w.startswith("--") and len(w) > 2}


def containerd_config(node: ReferenceNode, base: Path) -> str:
    """containerd's config.toml: root, state, sockets and runc's root under `base`, the CRI
    plugin on the node's CNI network with the node's pause image as sandbox image."""
    return f"""version = 2
root = {json.dumps(str(base / "root"))}
state = {json.dumps(str(base / "state"))}
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
]

[grpc]
  address = {json.dumps(str(node.socket))}

[ttrpc]
  address = {json.dumps(str(node.socket) + ".ttrpc")}

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {json.dumps(str(base / "opt"))}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {json.dumps(node.pause_image)}
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  restrict_oom_score_adj = {str(not host.has_capability(CAP_SYS_RESOURCE)).lower()}

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = {json.dumps(str(base / "runc"))}

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = {json.dumps(str(CNI_BIN_DIR))}
  conf_dir = {json.dumps(str(node.workdir / "cni"))}
  max_conf_num = 1
"""


def cni_conflist(node: ReferenceNode) -> dict[str, Any]:
    """The node's CNI network: its bridge, host-local addresses of its subnet (state in its
    work directory), then portmap and firewall."""
    assert node.subnet is not None
    gateway = node.subnet[1]
    return {
        "cniVersion": "0.4.0",
        "name": node.network_name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(node.subnet), "gateway": str(gateway)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.workdir / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "firewall"},
        ],
    }


def kubelet_command(node: ReferenceNode, kubelet: Path, creds: NodeCredentials) -> list[str]:
    """The kubelet's command line, its KubeletConfiguration written under the node's work
    directory: the runtime told by flags to a kubelet that still takes `--container-runtime`
    (v1.26 and older), in the configuration to a newer one."""
    assert node.node_ip is not None
    flags = kubelet_flags(kubelet)
    root = node.workdir / "kubelet"
    root.mkdir(exist_ok=True)
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.node_ip,
        "port": node.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "tlsCertFile": str(creds.serving.cert),
        "tlsPrivateKeyFile": str(creds.serving.key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(creds.client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "failSwapOn": False,
        "evictionHard": {},
        "evictionSoft": {},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # The kubelet's own defaults where they shape what a pod's status shows, and
        # today's client limits (v1.27 raised them from 5/10): with v1.24's, the
        # scenarios `compare` runs at once queued its status writes and events for
        # seconds, and a queued write is skipped (each pod alone would not see that).
        "syncFrequency": "1m",
        "kubeAPIQPS": 50,
        "kubeAPIBurst": 100,
        "eventRecordQPS": 50,
        "eventBurst": 100,
        "clusterDomain": node.cluster_domain,
        "clusterDNS": list(node.cluster_dns),
        "makeIPTablesUtilChains": False,
        "volumePluginDir": str(root / "volume-plugins"),
        "serializeImagePulls": False,
        "registerNode": True,
    }
    if node.static_pod_path is not None:
        node.static_pod_path.mkdir(parents=True, exist_ok=True)
        config["staticPodPath"] = str(node.static_pod_path)
    endpoint = f"unix://{node.socket}"
    if "--container-runtime" in flags:  # v1.26 and older: the runtime is told by flags
        runtime_flags = [
            "--container-runtime", "remote",
            "--container-runtime-endpoint", endpoint,
            "--image-service-endpoint", endpoint,
        ]  # fmt: skip
    else:  # v1.27 on: in the configuration (the flags are deprecated, --container-runtime gone)
        config["containerRuntimeEndpoint"] = endpoint
        config["imageServiceEndpoint"] = endpoint
        runtime_flags = []
    # Only image GC's keep-list since v1.27 (containerd's sandbox_image is the sandbox's);
    # going in v1.35.
    if "--pod-infra-container-image" in flags:
        runtime_flags += ["--pod-infra-container-image", node.pause_image]
    (root / "config.yaml").write_text(json.dumps(config, indent=2))  # JSON is YAML
    return [
        str(kubelet),
        "--config", str(root / "config.yaml"),
        "--kubeconfig", str(creds.kubeconfig),
        "--hostname-override", node.name,
        "--node-ip", node.node_ip,
        *runtime_flags,
        "--root-dir", str(root / "root"),
        "--cert-dir", str(root / "pki"),
        *(["--register-with-taints", ",".join(node.taints)] if node.taints else []),
        *(["--node-labels", ",".join(f"{k}={v}" for k, v in node.labels.items())]
          if node.labels else []),
        f"--v={node.verbosity}",
    ]  # fmt: skip
