"""Static pods: what the kubelet makes of a manifest file, and of its mirror pod (pure).

A manifest read from `--pod-manifest-path` becomes a pod as the kubelet's file source makes it
(`pkg/kubelet/config/common.go` applyDefaults, `config.go`): named `<name>-<node>`, in its own
namespace or `default`, bound to the node, a UID hashed from the manifest, the node and the file,
a toleration of every NoExecute taint, and the `kubernetes.io/config.*` annotations. Its mirror
pod, the API's copy (`pkg/kubelet/pod/mirror_client.go`), is the same pod with the
`kubernetes.io/config.mirror` annotation (the static pod's hash) and the Node as its controller.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.validation import is_dns1123_subdomain

CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_HASH = "kubernetes.io/config.hash"
CONFIG_SEEN = "kubernetes.io/config.seen"
CONFIG_MIRROR = "kubernetes.io/config.mirror"
FILE_SOURCE = "file"
API_SOURCE = "api"
DEFAULT_NAMESPACE = "default"
# applyDefaults: static pods from files tolerate every NoExecute taint, so that they are not
# evicted when the node has problems.
NO_EXECUTE_TOLERATION: Json = {"operator": "Exists", "effect": "NoExecute"}


class ManifestError(ValueError):
    """A manifest that is no pod the kubelet would run; the message says why, in one line."""


def static_pod_name(name: str, node_name: str) -> str:
    """generatePodName: `<name>-<node>`, the node's name in lower case."""
    return f"{name}-{node_name.lower()}"


def static_pod_uid(manifest: Mapping[str, object], node_name: str, source: str) -> str:
    """The UID the kubelet gives a pod from a file that names none: an MD5 of the pod, then of
    `host:<node>` and `file:<path>` (applyDefaults). The kubelet hashes its Go object
    (hash.DeepHashObject, spew's printing); here the manifest's canonical JSON (keys sorted) is
    hashed instead: the same manifest, node and file give the same UID on every read and after a
    restart, and any change of one of them a new one."""
    hasher = hashlib.md5(usedforsecurity=False)
    hasher.update(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    hasher.update(f"host:{node_name}".encode())
    hasher.update(f"file:{source}".encode())
    return hasher.hexdigest()


def seen_timestamp(now: datetime) -> str:
    """`kubernetes.io/config.seen`: Go's time.RFC3339Nano (trailing zeros of the fraction cut)."""
    text = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return f"{text}Z"


def validate_manifest(manifest: object) -> Json:
    """The manifest if it is a v1 Pod the kubelet would decode and run; ManifestError if not
    (tryDecodeSinglePod: a Pod, with a name and containers that have a name and an image, each
    field of the type the API's decoder wants). Each manifest is checked on its own, before
    it becomes a pod: a bad one is skipped and never stops the others."""
    if not isinstance(manifest, dict):
        raise ManifestError("the manifest is not an object")
    kind, version = manifest.get("kind"), manifest.get("apiVersion")
    if kind != "Pod" or version != "v1":
        raise ManifestError(f"the manifest is a {version}/{kind}, not a v1 Pod")
    meta = manifest.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ManifestError("metadata.name is required")
    _check_metadata(meta)
    spec = manifest.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or not isinstance(containers, list) or not containers:
        raise ManifestError("spec.containers is required")
    for c in containers:
        if not isinstance(c, dict) or not _is_text(c.get("name")) or not _is_text(c.get("image")):
            raise ManifestError("every container needs a name and an image")
    tolerations = spec.get("tolerations")
    if tolerations is not None and not (
        isinstance(tolerations, list) and all(isinstance(t, dict) for t in tolerations)
    ):
        raise ManifestError("spec.tolerations must be a list of objects")
    return manifest


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _check_metadata(meta: Json) -> None:
    """The metadata a static pod is made from: names the API would take (DNS-1123), a UID that
    is text, labels and annotations that are maps of text to text."""
    for key in ("name", "namespace"):
        value = meta.get(key)
        if value not in (None, "") and not (isinstance(value, str) and is_dns1123_subdomain(value)):
            raise ManifestError(f"metadata.{key} must be a DNS-1123 subdomain")
    if "uid" in meta and not isinstance(meta["uid"], str):
        raise ManifestError("metadata.uid must be a string")
    for key in ("labels", "annotations"):
        texts = meta.get(key)
        if texts is None:
            continue
        if not isinstance(texts, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in texts.items()
        ):
            raise ManifestError(f"metadata.{key} must be a map of strings to strings")


def static_pod(manifest: Json, node_name: str, source: str, seen: str) -> Json:
    """The pod the kubelet runs from `manifest` (validated), read from the file `source`."""
    pod = copy.deepcopy(manifest)
    meta = pod.setdefault("metadata", {})
    uid = str(meta.get("uid") or "") or static_pod_uid(manifest, node_name, source)
    meta["uid"] = uid
    meta["name"] = static_pod_name(str(meta["name"]), node_name)
    meta["namespace"] = meta.get("namespace") or DEFAULT_NAMESPACE
    annotations = meta.get("annotations") or {}
    meta["annotations"] = {
        **annotations,
        CONFIG_HASH: uid,
        CONFIG_SEEN: seen,
        CONFIG_SOURCE: FILE_SOURCE,
    }
    spec = pod.setdefault("spec", {})
    spec["nodeName"] = node_name
    tolerations = list(spec.get("tolerations") or [])
    if NO_EXECUTE_TOLERATION not in tolerations:
        tolerations.append(dict(NO_EXECUTE_TOLERATION))
    spec["tolerations"] = tolerations
    pod["status"] = {"phase": "Pending"}
    return pod


def mirror_pod(static: Json, node_name: str, node_uid: str) -> Json:
    """CreateMirrorPod's body: the static pod with the `config.mirror` annotation and the Node
    as its controller (the server gives it a UID of its own)."""
    pod = copy.deepcopy(static)
    meta = pod["metadata"]
    meta["annotations"] = {**(meta.get("annotations") or {}), CONFIG_MIRROR: static_hash(static)}
    meta["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": node_name,
            "uid": node_uid,
            "controller": True,
        }
    ]
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    return pod


def _annotations(pod: Json) -> Mapping[str, object]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def is_mirror_pod(pod: Json) -> bool:
    """IsMirrorPod: the API's copy of a static pod (never run for itself)."""
    return CONFIG_MIRROR in _annotations(pod)


def is_static_pod(pod: Json) -> bool:
    """IsStaticPod: a pod from a source other than the API."""
    source = _annotations(pod).get(CONFIG_SOURCE)
    return source is not None and source != API_SOURCE


def static_hash(pod: Json) -> str:
    """getPodHash: the static pod's `config.hash` annotation."""
    return str(_annotations(pod).get(CONFIG_HASH) or "")


def mirror_hash(pod: Json) -> str:
    """The hash of the static pod a mirror pod stands for ("" if none)."""
    return str(_annotations(pod).get(CONFIG_MIRROR) or "")


def full_name(pod: Json) -> tuple[str, str]:
    """(namespace, name): how a mirror pod is matched with its static pod."""
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or DEFAULT_NAMESPACE), str(meta.get("name") or "")
