"""The kubelet's own security decisions (sysctl admission, runAsNonRoot, groups, seccomp,
AppArmor)."""

from __future__ import annotations

from typing import Any

from kubelet_sim.pod.security import (
    apparmor_option,
    apparmor_rejection,
    non_root_problem,
    seccomp_profile,
    supplemental_groups,
    sysctl_rejection,
    sysctls,
)
from kubelet_sim.pod.spec import PodView


def pod(container: dict[str, Any] | None = None, **spec: Any) -> PodView:
    return PodView.from_api(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i", **(container or {})}], **spec},
        }
    )


def with_sysctls(*names: str, **spec: Any) -> PodView:
    return pod(securityContext={"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec)


def test_sysctls_safe_unsafe_and_host_namespaces() -> None:
    assert (
        sysctl_rejection(with_sysctls("net.ipv4.tcp_syncookies", "kernel.shm_rmid_forced")) is None
    )
    assert sysctls(with_sysctls("net/ipv4/ip_local_port_range")) == [
        ("net.ipv4.ip_local_port_range", "1")
    ]
    assert sysctl_rejection(with_sysctls("kernel.msgmax")) == (
        'forbidden sysctl: "kernel.msgmax" not allowlisted'
    )
    assert sysctl_rejection(with_sysctls("kernel.msgmax"), ["kernel.msg*"]) is None
    assert sysctl_rejection(with_sysctls("net.core.somaxconn"), ["net.core.somaxconn"]) is None
    assert sysctl_rejection(with_sysctls("net.ipv4.tcp_syncookies", hostNetwork=True)) == (
        'forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled'
    )
    assert sysctl_rejection(with_sysctls("kernel.shm_rmid_forced", hostIPC=True)) == (
        'forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled'
    )


def test_run_as_non_root_against_the_image_user() -> None:
    strict = pod(securityContext={"runAsNonRoot": True})
    who = '(pod: "p_ns(u)", container: c)'
    assert non_root_problem(strict, strict.containers[0], "") == (
        f"container has runAsNonRoot and image will run as root {who}"
    )
    assert non_root_problem(strict, strict.containers[0], "0:0") is not None
    assert non_root_problem(strict, strict.containers[0], "1000:1000") is None
    assert non_root_problem(strict, strict.containers[0], "nobody") == (
        "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user"
        f" is non-root {who}"
    )
    overridden = pod(
        {"securityContext": {"runAsNonRoot": False}}, securityContext={"runAsNonRoot": True}
    )
    assert non_root_problem(overridden, overridden.containers[0], "") is None, (
        "the container's wins"
    )
    zero = pod({"securityContext": {"runAsUser": 0}}, securityContext={"runAsNonRoot": True})
    assert non_root_problem(zero, zero.containers[0], "1000") == (
        f"container's runAsUser breaks non-root policy {who}"
    )


def test_groups_and_seccomp() -> None:
    grouped = pod(securityContext={"fsGroup": 3, "supplementalGroups": [1, 2]})
    assert supplemental_groups(grouped) == (3, 1, 2), "fsGroup first, as the kubelet adds it"
    assert seccomp_profile(pod(), pod().containers[0]) == "unconfined"
    both = pod(
        {
            "securityContext": {
                "seccompProfile": {"type": "Localhost", "localhostProfile": "a.json"}
            }
        },
        securityContext={"seccompProfile": {"type": "RuntimeDefault"}},
    )
    assert seccomp_profile(both, both.containers[0]) == "localhost/a.json"
    pod_wide = pod(securityContext={"seccompProfile": {"type": "RuntimeDefault"}})
    assert seccomp_profile(pod_wide, pod_wide.containers[0]) == "runtime/default"


def annotated(value: str, container: dict[str, Any] | None = None, **spec: Any) -> PodView:
    view = pod(container, **spec)
    key = "container.apparmor.security.beta.kubernetes.io/c"
    view.raw["metadata"]["annotations"] = {key: value}
    return view


def test_apparmor_profiles_field_over_annotation_over_pod_and_admission() -> None:
    (c,) = pod().containers
    assert apparmor_option(pod(), c) == ""  # the runtime's default
    unconfined = {"appArmorProfile": {"type": "Unconfined"}}
    local = {"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-deny"}}
    assert apparmor_option(pod(securityContext=local), c) == "k8s-deny"
    assert apparmor_option(annotated("unconfined", securityContext=local), c) == "unconfined"
    field = annotated("localhost/other", {"securityContext": unconfined})
    assert apparmor_option(field, field.containers[0]) == "unconfined"
    assert apparmor_option(annotated("localhost/x"), c) == "x"
    assert apparmor_rejection(pod(), host_enabled=False) is None
    assert apparmor_rejection(pod(securityContext=unconfined), host_enabled=False) is None
    assert apparmor_rejection(annotated("unconfined"), host_enabled=False) is None
    for required in (annotated("runtime/default"), pod(securityContext=local)):
        assert apparmor_rejection(required, host_enabled=False) == (
            "Cannot enforce AppArmor: AppArmor is not enabled on the host"
        )
        assert apparmor_rejection(required, host_enabled=True) is None
