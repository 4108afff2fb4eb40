"""The runtime's pure parts, without Docker: create bodies, inspect parsing, image ids, files."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.runtime import images, privileged, translate
from kubelet_sim.runtime.parse import container_state, observed_from_inspect, parse_time
from kubelet_sim.runtime.pod_files import PodFiles

POD = cri.PodRef(node="n1", name="web", namespace="ns", uid="u-1")


def container(**kw: Any) -> cri.ContainerConfig:
    return cri.ContainerConfig(
        pod=POD,
        name="app",
        attempt=2,
        image="img",
        spec_hash="h",
        **kw,
    )


def sandbox_body(**kw: Any) -> dict[str, Any]:
    """The create body of the sandbox of POD named web, first attempt, with these settings."""
    return translate.sandbox_body(
        cri.SandboxConfig(pod=POD, attempt=0, image="pause", hostname="web", **kw)
    )


@pytest.mark.parametrize(
    ("entrypoint", "cmd", "expected"),
    [
        (None, None, (None, None)),  # the image's ENTRYPOINT and CMD
        ((), (), (None, None)),  # empty lists mean unset in Kubernetes
        (("run",), None, (["run"], [])),  # command drops the image's CMD
        (None, ("a", "b"), (None, ["a", "b"])),  # args replace CMD, keep ENTRYPOINT
        (("run",), ("a",), (["run"], ["a"])),
    ],
)
def test_command_fields(
    entrypoint: tuple[str, ...] | None,
    cmd: tuple[str, ...] | None,
    expected: tuple[list[str] | None, list[str] | None],
) -> None:
    fields = translate.command_fields(container(entrypoint=entrypoint, cmd=cmd))
    assert (fields["Entrypoint"], fields["Cmd"]) == expected


def test_user_field() -> None:
    assert translate.user_field(cri.SecurityConfig()) == ""
    assert translate.user_field(cri.SecurityConfig(run_as_user=0)) == "0"
    assert translate.user_field(cri.SecurityConfig(run_as_user=1, run_as_group=2)) == "1:2"
    with pytest.raises(translate.TranslateError, match="runAsGroup"):
        translate.user_field(cri.SecurityConfig(run_as_group=2))


def test_names_and_labels() -> None:
    cfg = container(extra_labels={cri.LABEL_POD_UID: "spoofed", "team": "a"})
    assert translate.container_name(cfg) == "k8s_app_web_ns_u-1_2"
    labels = translate.container_labels(cfg)
    assert labels[cri.LABEL_POD_UID] == "u-1"  # ours win over extra labels
    assert labels["team"] == "a"
    assert labels[cri.LABEL_RESTART_COUNT] == "2"
    sandbox = cri.SandboxConfig(pod=POD, attempt=1, image="pause", hostname="h")
    assert translate.sandbox_name(sandbox) == "k8s_POD_web_ns_u-1_1"


def test_sandbox_body_bridge_with_ports_and_sysctls() -> None:
    body = sandbox_body(
        port_mappings=(
            cri.PortMapping(80, 8080),
            cri.PortMapping(81, 0),
            cri.PortMapping(53, 53, "UDP", "10.0.0.1"),
        ),
        sysctls=(("net.ipv4.tcp_syncookies", "1"),),
    )
    host = body["HostConfig"]
    assert body["Hostname"] == "web"
    assert set(body["ExposedPorts"]) == {"80/tcp", "81/tcp", "53/udp"}
    assert host["PortBindings"] == {
        "80/tcp": [{"HostIp": "", "HostPort": "8080"}],
        "53/udp": [{"HostIp": "10.0.0.1", "HostPort": "53"}],
    }
    assert (host["NetworkMode"], host["IpcMode"]) == ("bridge", "shareable")
    assert host["Sysctls"] == {"net.ipv4.tcp_syncookies": "1"}
    assert "Dns" not in host, "the pod's resolv.conf is a file the kubelet writes, not Docker's"


def test_sandbox_body_host_namespaces() -> None:
    body = sandbox_body(
        host_network=True,
        host_pid=True,
        host_ipc=True,
        port_mappings=(cri.PortMapping(80, 80),),
    )
    host = body["HostConfig"]
    assert "Hostname" not in body
    assert "PortBindings" not in host
    assert (host["NetworkMode"], host["IpcMode"], host["PidMode"]) == ("host", "host", "host")


def test_container_body_mounts_and_host_namespaces() -> None:
    body = translate.container_body(
        container(
            mounts=(
                cri.Mount("/h/a", "/a"),
                cri.Mount("/h/b", "/b", read_only=True),
                cri.Mount("", "/mem", tmpfs=True),
            ),
            termination_message_path="",
        ),
        "sb",
        termination_log="/root/log",
        host_network=True,
        host_pid=True,
    )
    host = body["HostConfig"]
    assert host["Binds"] == ["/h/a:/a", "/h/b:/b:ro"]  # no message path: no log mount
    [memory] = host["Mounts"]
    assert memory["Type"] == "volume"
    assert memory["Target"] == "/mem"
    assert memory["VolumeOptions"]["DriverConfig"]["Options"]["type"] == "tmpfs"
    assert (host["NetworkMode"], host["IpcMode"]) == ("container:sb", "container:sb")
    assert (host["UTSMode"], host["PidMode"]) == ("host", "host")
    assert host["SecurityOpt"] == ["seccomp=unconfined"], "no profile is Unconfined"
    assert body["Healthcheck"] == {"Test": ["NONE"]}


def test_privileged_keeps_dockers_flag_where_the_engine_grants_everything() -> None:
    sec = cri.SecurityConfig(privileged=True, capabilities_add=("NET_ADMIN",))
    host = translate.container_body(container(security=sec), "sb")["HostConfig"]
    assert host["Privileged"] is True
    assert host["CapAdd"] == ["NET_ADMIN"]
    assert "Devices" not in host


def test_privileged_spelled_out_where_the_engine_lacks_a_capability() -> None:
    """containerd's privileged: the engine's capabilities (asked ones and drops ignored), all
    devices, no seccomp/AppArmor, no masked paths, writable sysfs; the pod's tmpfs stays."""
    parts = privileged.PrivilegedParts(("CAP_CHOWN", "CAP_SYS_ADMIN"), ("/dev/kmsg",))
    sec = cri.SecurityConfig(
        privileged=True, capabilities_add=("NET_ADMIN",), capabilities_drop=("MKNOD",)
    )
    mem = cri.Mount("", "/mem", tmpfs=True)
    body = translate.container_body(container(security=sec, mounts=(mem,)), "sb", privileged=parts)
    host = body["HostConfig"]
    assert host["Privileged"] is False
    assert host["CapAdd"] == ["CAP_CHOWN", "CAP_SYS_ADMIN"]
    assert "CapDrop" not in host
    assert host["Devices"] == [
        {"PathOnHost": "/dev/kmsg", "PathInContainer": "/dev/kmsg", "CgroupPermissions": "rwm"}
    ]
    assert host["DeviceCgroupRules"] == ["a *:* rwm"]
    assert (host["MaskedPaths"], host["ReadonlyPaths"]) == ([], [])
    assert host["SecurityOpt"] == ["seccomp=unconfined", "apparmor=unconfined"]
    assert [m["Target"] for m in host["Mounts"]] == ["/mem", "/sys"]
    assert host["Mounts"][1]["BindOptions"] == {"NonRecursive": True}
    # An unprivileged container is not touched by the parts.
    plain = translate.container_body(container(), "sb", privileged=parts)["HostConfig"]
    assert plain["Privileged"] is False
    assert "CapAdd" not in plain


def test_capability_names_and_bounding_set() -> None:
    status = "Name:\tdockerd\nCapEff:\t000001fffeffffff\nCapBnd:\t000001fffeffffff\n"
    mask = privileged.cap_bounding_set(status)
    assert mask == 0x1FFFEFFFFFF
    names = privileged.capability_names(mask, frozenset({"BPF"}))
    assert "CAP_SYS_RESOURCE" not in names  # bit 24, which this project's engines lack
    assert "CAP_BPF" not in names  # the engine has it, Docker has no name for it
    assert {"CAP_SYS_ADMIN", "CAP_PERFMON", "CAP_CHECKPOINT_RESTORE"} <= set(names)
    assert len(names) == 39
    assert privileged.cap_bounding_set("Name:\tx\n") is None
    match = privileged.UNKNOWN_CAPABILITY.search('invalid CapAdd: unknown capability: "CAP_BPF"')
    assert match is not None
    assert match.group(1) == "BPF"


def test_host_devices_as_containerd_lists_them(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "pts").mkdir(parents=True)
    (dev / "net").mkdir()
    (dev / "file").write_text("")
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    for path in ("null", "console", "pts/0", "net/tun"):
        os.mknod(dev / path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    assert privileged.host_devices(dev) == (str(dev / "null"), str(dev / "net/tun"))


def test_parse_time() -> None:
    assert parse_time("0001-01-01T00:00:00Z") is None
    assert parse_time("") is None
    assert parse_time("2024-05-01T10:00:00.123456789Z") == datetime(
        2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"Status": "running", "Running": True}, cri.ContainerState.RUNNING),
        ({"Status": "paused", "Running": True, "Paused": True}, cri.ContainerState.RUNNING),
        ({"Status": "created", "FinishedAt": "0001-01-01T00:00:00Z"}, cri.ContainerState.CREATED),
        (
            {"Status": "exited", "FinishedAt": "2024-05-01T10:00:00Z", "ExitCode": 0},
            cri.ContainerState.EXITED,
        ),
        ({"Status": "dead", "Dead": True}, cri.ContainerState.EXITED),
        ({"Status": "created", "ExitCode": 127, "Error": "exec"}, cri.ContainerState.EXITED),
        ({"Status": "weird"}, cri.ContainerState.UNKNOWN),
    ],
)
def test_container_state(state: dict[str, object], expected: cri.ContainerState) -> None:
    assert container_state(state) == expected


def test_observed_from_inspect() -> None:
    labels = translate.container_labels(container())
    attrs = {
        "Id": "abc",
        "Name": "/k8s_app_web_ns_u-1_2",
        "Created": "2024-05-01T09:59:59Z",
        "Config": {"Image": "img", "Labels": labels},
        "State": {
            "Status": "running",
            "Running": True,
            "StartedAt": "2024-05-01T10:00:00Z",
            "FinishedAt": "0001-01-01T00:00:00Z",
            "ExitCode": 0,
        },
        "NetworkSettings": {"IPAddress": ""},
    }
    observed = observed_from_inspect(attrs, "docker://sha256:x")
    assert observed is not None
    assert (observed.pod, observed.name, observed.attempt) == (POD, "app", 2)
    assert (observed.state, observed.exit_code, observed.finished_at) == (
        cri.ContainerState.RUNNING,
        None,
        None,
    )
    assert observed.image_id == "docker://sha256:x"
    assert observed_from_inspect({"Config": {"Labels": {"other": "x"}}}) is None


def test_registry_auth_payload() -> None:
    assert images.auth_config(None) is None
    auth = cri.RegistryAuth(server="reg:5000", username="u", password="p")
    assert images.auth_config(auth) == {
        "serveraddress": "reg:5000",
        "username": "u",
        "password": "p",
    }
    assert "p'" not in repr(auth)


def test_pod_files(tmp_path: Path) -> None:
    files = PodFiles(tmp_path)
    path = files.create_termination_log("u-1", "app", 0)
    assert path == tmp_path / "pods/u-1/containers/app/0-termination-log"
    assert files.read_termination_message("u-1", "app", 0) == ""
    path.write_text("x" * 5000 + "tail")
    message = files.read_termination_message("u-1", "app", 0)
    assert len(message) == 4096
    assert message.endswith("xtail")
    assert files.read_termination_message("u-1", "other", 0) == ""
    with pytest.raises(ValueError, match="unsafe"):
        files.pod_dir("../etc")
    files.remove_pod_dir("u-1")
    assert not (tmp_path / "pods/u-1").exists()
