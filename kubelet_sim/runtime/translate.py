"""CRI configs → Docker Engine API create bodies, as dockershim built them. Pure: no Docker calls.

The bodies are the JSON of `POST /containers/create`, so what we ask Docker for is visible in one
place and testable without an engine.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kubelet_sim import cri
from kubelet_sim.runtime.privileged import PrivilegedParts

# dockershim disabled image health checks: the kubelet runs its own probes.
_NO_HEALTHCHECK = {"Test": ["NONE"]}


class TranslateError(ValueError):
    """A config Docker cannot express (dockershim refused the same: CreateContainerError)."""


def sandbox_name(cfg: cri.SandboxConfig) -> str:
    """dockershim's `k8s_POD_<pod>_<namespace>_<uid>_<attempt>`."""
    pod = cfg.pod
    return f"k8s_{cri.SANDBOX_CONTAINER_NAME}_{pod.name}_{pod.namespace}_{pod.uid}_{cfg.attempt}"


def container_name(cfg: cri.ContainerConfig) -> str:
    """dockershim's `k8s_<container>_<pod>_<namespace>_<uid>_<attempt>`."""
    pod = cfg.pod
    return f"k8s_{cfg.name}_{pod.name}_{pod.namespace}_{pod.uid}_{cfg.attempt}"


def _pod_labels(pod: cri.PodRef, name: str, kind: str, attempt: int) -> dict[str, str]:
    return {
        cri.LABEL_NODE: pod.node,
        cri.LABEL_POD_NAME: pod.name,
        cri.LABEL_POD_NAMESPACE: pod.namespace,
        cri.LABEL_POD_UID: pod.uid,
        cri.LABEL_CONTAINER_NAME: name,
        cri.LABEL_CONTAINER_TYPE: kind,
        cri.LABEL_RESTART_COUNT: str(attempt),
    }


def sandbox_labels(cfg: cri.SandboxConfig) -> dict[str, str]:
    own = _pod_labels(cfg.pod, cri.SANDBOX_CONTAINER_NAME, "podsandbox", cfg.attempt)
    return {**cfg.extra_labels, **own}  # ours win: state is rebuilt from them


def container_labels(cfg: cri.ContainerConfig) -> dict[str, str]:
    own = _pod_labels(cfg.pod, cfg.name, "container", cfg.attempt)
    own |= {
        cri.LABEL_CONTAINER_HASH: cfg.spec_hash,
        cri.LABEL_TERMINATION_MESSAGE_PATH: cfg.termination_message_path,
        cri.LABEL_TERMINATION_MESSAGE_POLICY: cfg.termination_message_policy,
        cri.LABEL_TERMINATION_GRACE_PERIOD: str(cfg.termination_grace_period),
    }
    return {**cfg.extra_labels, **own}


def _port_key(port: cri.PortMapping) -> str:
    return f"{port.container_port}/{port.protocol.lower()}"


def sandbox_body(
    cfg: cri.SandboxConfig, network: str = "bridge", *, log_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The pause container: owns the pod's network (`network`, or the host's), IPC (shareable)
    and ports. `log_config` is HostConfig.LogConfig (rotation), for it as for every container.

    A port with hostPort 0 is only exposed, not published: Kubernetes publishes nothing for it.
    """
    host: dict[str, Any] = {
        "NetworkMode": "host" if cfg.host_network else network,
        "IpcMode": "host" if cfg.host_ipc else "shareable",
    }
    if cfg.host_pid:
        host["PidMode"] = "host"
    if log_config:
        host["LogConfig"] = log_config
    if cfg.sysctls:
        host["Sysctls"] = dict(cfg.sysctls)
    body: dict[str, Any] = {
        "Image": cfg.image,
        "Labels": sandbox_labels(cfg),
        "Healthcheck": _NO_HEALTHCHECK,
    }
    if cfg.host_network:
        host["UTSMode"] = "host"  # the node's hostname, as for hostNetwork pods
    else:
        body["Hostname"] = cfg.hostname
        if cfg.port_mappings:
            body["ExposedPorts"] = {_port_key(p): {} for p in cfg.port_mappings}
            bindings: dict[str, list[dict[str, str]]] = {}
            for p in cfg.port_mappings:
                if p.host_port:
                    bindings.setdefault(_port_key(p), []).append(
                        {"HostIp": p.host_ip, "HostPort": str(p.host_port)}
                    )
            host["PortBindings"] = bindings
    body["HostConfig"] = host
    return body


def pool_sandbox_body(
    node: str, image: str, network: str = "bridge", *, log_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A warm sandbox for the node's pool: what `sandbox_body` makes for a pod that may use the
    pool (podworkers/pool.py says which), without the pod's labels and hostname, which are not
    known yet. Its hostname is Docker's default (the id's start) until a pod claims it."""
    host: dict[str, Any] = {"NetworkMode": network, "IpcMode": "shareable"}
    if log_config:
        host["LogConfig"] = log_config
    return {
        "Image": image,
        "Labels": {
            cri.LABEL_NODE: node,
            cri.LABEL_CONTAINER_TYPE: "podsandbox",
            cri.LABEL_POOL: "true",
        },
        "Healthcheck": _NO_HEALTHCHECK,
        "HostConfig": host,
    }


def anchor_body(image: str, labels: dict[str, str], network: str) -> dict[str, Any]:
    """A container that only holds a network namespace on `network` (DockerEngine.run_anchor)."""
    return {
        "Image": image,
        "Labels": dict(labels),
        "Healthcheck": _NO_HEALTHCHECK,
        "HostConfig": {"NetworkMode": network},
    }


def command_fields(cfg: cri.ContainerConfig) -> dict[str, list[str] | None]:
    """Entrypoint/Cmd: `command` replaces the image's entrypoint AND its cmd; `args` its cmd.

    An empty list means unset in Kubernetes, so `()` is treated as None. With an entrypoint, an
    explicit empty Cmd makes sure the image's CMD never runs.
    """
    entrypoint = list(cfg.entrypoint) if cfg.entrypoint else None
    cmd = list(cfg.cmd) if cfg.cmd else None
    if entrypoint is not None and cmd is None:
        cmd = []
    return {"Entrypoint": entrypoint, "Cmd": cmd}


def user_field(sec: cri.SecurityConfig) -> str:
    """`uid` or `uid:gid`; a group without a user is refused, as dockershim did."""
    if sec.run_as_user is None:
        if sec.run_as_group is not None:
            raise TranslateError("runAsGroup is specified without a runAsUser")
        return ""
    if sec.run_as_group is None:
        return str(sec.run_as_user)
    return f"{sec.run_as_user}:{sec.run_as_group}"


def _resources(res: cri.Resources) -> dict[str, int]:
    out: dict[str, int] = {}
    if res.cpu_period is not None:
        out["CpuPeriod"] = res.cpu_period
    if res.cpu_quota is not None:
        out["CpuQuota"] = res.cpu_quota
    if res.cpu_shares is not None:
        out["CpuShares"] = res.cpu_shares
    if res.memory_limit_bytes is not None:
        out["Memory"] = res.memory_limit_bytes
        # Nodes run without swap (the kubelet's default), so the limit is the whole limit.
        out["MemorySwap"] = res.memory_limit_bytes
    return out


def _add_security(
    host: dict[str, Any], sec: cri.SecurityConfig, privileged: PrivilegedParts | None
) -> None:
    """HostConfig's capabilities, seccomp, AppArmor and masked paths; for a privileged
    container where the engine cannot grant Docker's flag, its parts as containerd gives them."""
    options = ["no-new-privileges"] if sec.no_new_privileges else []
    if sec.privileged and privileged is not None:
        parts = privileged.host_config()
        host["Mounts"] = host.get("Mounts", []) + parts.pop("Mounts")
        host.update(parts)
        options += ["seccomp=unconfined", "apparmor=unconfined"]
    else:
        if sec.capabilities_add:
            host["CapAdd"] = list(sec.capabilities_add)
        if sec.capabilities_drop:
            host["CapDrop"] = list(sec.capabilities_drop)
        if sec.seccomp == "unconfined" or sec.seccomp.startswith("{"):
            options.append(f"seccomp={sec.seccomp}")  # a profile's JSON, read by the runtime
        if sec.unmasked_proc:  # empty, not absent, as `--security-opt systempaths=unconfined`
            host["MaskedPaths"], host["ReadonlyPaths"] = [], []
        if sec.apparmor:  # Docker ignores it on a host without AppArmor
            options.append(f"apparmor={sec.apparmor}")
    if options:
        host["SecurityOpt"] = options


def container_body(
    cfg: cri.ContainerConfig,
    sandbox_id: str,
    *,
    termination_log: str | None = None,
    host_network: bool = False,
    host_pid: bool = False,
    log_config: dict[str, Any] | None = None,
    privileged: PrivilegedParts | None = None,
) -> dict[str, Any]:
    """An app/init container joining its sandbox's network and IPC namespaces.

    `termination_log` is the host file bind-mounted at terminationMessagePath;
    `host_network`/`host_pid` are the sandbox's, which the container shares (dockershim);
    `log_config` is HostConfig.LogConfig: the json-file driver's rotation;
    `privileged` is what a privileged container gets where the engine cannot grant Docker's
    flag (its parts, as containerd gives them: added and dropped capabilities are then
    ignored, as containerd ignores them); None keeps `Privileged: true`.
    """
    sandbox_ns = f"container:{sandbox_id}"
    sec = cfg.security
    binds = [
        f"{m.host_path}:{m.container_path}{':ro' if m.read_only else ''}"
        for m in cfg.mounts
        if not m.tmpfs
    ]
    if termination_log and cfg.termination_message_path:
        binds.append(f"{termination_log}:{cfg.termination_message_path}")
    host: dict[str, Any] = {
        "NetworkMode": sandbox_ns,
        "IpcMode": sandbox_ns,
        "Binds": binds,
        "Privileged": sec.privileged,
        "ReadonlyRootfs": sec.read_only_rootfs,
        **_resources(cfg.resources),
    }
    shared_tmpfs = [_tmpfs_volume_mount(cfg, m) for m in cfg.mounts if m.tmpfs]
    if shared_tmpfs:
        host["Mounts"] = shared_tmpfs
    if host_network:
        host["UTSMode"] = "host"
    if host_pid:
        host["PidMode"] = "host"
    elif cfg.pid_namespace_of:
        host["PidMode"] = f"container:{cfg.pid_namespace_of}"
    if log_config:
        host["LogConfig"] = log_config
    _add_security(host, sec, privileged)
    if sec.supplemental_groups:
        host["GroupAdd"] = [str(g) for g in sec.supplemental_groups]
    body: dict[str, Any] = {
        "Image": cfg.image,
        **command_fields(cfg),
        "Env": [f"{k}={v}" for k, v in cfg.env],
        "Labels": container_labels(cfg),
        "User": user_field(sec),
        "Tty": cfg.tty,
        "OpenStdin": cfg.stdin,
        "StdinOnce": cfg.stdin_once,
        "Healthcheck": _NO_HEALTHCHECK,
        "HostConfig": host,
    }
    if cfg.working_dir:
        body["WorkingDir"] = cfg.working_dir
    return body


def tmpfs_volume_name(pod_uid: str, host_path: str) -> str:
    """One Docker volume per memory-backed emptyDir, so the pod's containers share it."""
    digest = hashlib.sha256(f"{pod_uid}:{host_path}".encode()).hexdigest()[:24]
    return f"k8s-tmpfs-{digest}"


def _tmpfs_volume_mount(cfg: cri.ContainerConfig, mount: cri.Mount) -> dict[str, Any]:
    """emptyDir with medium Memory: a tmpfs the local volume driver makes on first use. With an
    fsGroup its root is the group's and setgid (SetVolumeOwnership on the kubelet's tmpfs)."""
    options = "mode=1777" if mount.tmpfs_group is None else f"mode=3777,gid={mount.tmpfs_group}"
    return {
        "Type": "volume",
        "Source": tmpfs_volume_name(cfg.pod.uid, mount.host_path),
        "Target": mount.container_path,
        "ReadOnly": mount.read_only,
        "VolumeOptions": {
            "Labels": {cri.LABEL_NODE: cfg.pod.node, cri.LABEL_POD_UID: cfg.pod.uid},
            "DriverConfig": {
                "Name": "local",
                "Options": {"type": "tmpfs", "device": "tmpfs", "o": options},
            },
        },
    }
