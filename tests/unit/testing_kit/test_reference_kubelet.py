"""Which upstream kubelet the reference node runs, and how it is told its runtime: the one of
the API server's version (a comparison is with the kubelet of that version), configured by
file where `--container-runtime` is gone (v1.27 on), by flags before."""

from __future__ import annotations

import stat
from pathlib import Path

from kubelet_sim.controlplane.reference_config import find_kubelet, kubelet_flags

V124_HELP = """      --container-runtime string      The container runtime to use.
      --container-runtime-endpoint string   [Experimental] The endpoint of remote runtime service.
      --pod-infra-container-image string    Specified image will not be pruned"""
V134_HELP = """      --container-runtime-endpoint string The endpoint of container runtime service.
      --image-service-endpoint string   The endpoint of container image service."""


def _kubelet(directory: Path, help_text: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "kubelet"
    binary.write_text(f"#!/bin/sh\ncat <<'EOF' >&2\n{help_text}\nEOF\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def test_the_kubelet_beside_the_api_server_comes_before_the_newest_cached(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "kubelet-sim" / "kube-bin"
    old, new = _kubelet(cache / "1.24.0"), _kubelet(cache / "1.34.9")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": ""}
    assert find_kubelet(env) == new  # nothing known of the server: the newest
    assert find_kubelet(env, beside=cache / "1.24.0" / "kube-apiserver") == old
    elsewhere = tmp_path / "bin" / "kube-apiserver"  # a server without a kubelet beside it
    assert find_kubelet(env, beside=elsewhere, version="v1.24.0") == old
    assert find_kubelet(env, beside=elsewhere, version="v0.0.0-master") == new
    chosen = _kubelet(tmp_path / "mine")
    env["KUBELET_SIM_KUBELET"] = str(chosen)
    assert find_kubelet(env, beside=cache / "1.24.0" / "kube-apiserver") == chosen


def test_the_runtime_flags_are_read_from_the_binary(tmp_path: Path) -> None:
    old = kubelet_flags(_kubelet(tmp_path / "old", V124_HELP))
    new = kubelet_flags(_kubelet(tmp_path / "new", V134_HELP))
    assert "--container-runtime" in old
    assert "--pod-infra-container-image" in old
    assert "--container-runtime" not in new  # gone in v1.27: the endpoint goes in the file
    assert "--container-runtime-endpoint" in new
