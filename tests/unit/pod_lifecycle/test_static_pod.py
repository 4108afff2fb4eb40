"""Static pods' pure parts: the pod a manifest makes (name, UID, defaults), its mirror pod, and
reading a manifest directory; then the status sink that writes to the mirror."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.timers import Timers
from kubelet_sim.pod.static import (
    CONFIG_HASH,
    CONFIG_MIRROR,
    CONFIG_SEEN,
    CONFIG_SOURCE,
    ManifestError,
    full_name,
    is_mirror_pod,
    is_static_pod,
    mirror_hash,
    mirror_pod,
    seen_timestamp,
    static_hash,
    static_pod,
    static_pod_name,
    static_pod_uid,
    validate_manifest,
)
from kubelet_sim.staticpods.manifests import ManifestReader
from kubelet_sim.staticpods.source import StaticPods
from kubelet_sim.staticpods.status import MirrorStatus
from tests.unit.harness import FakeEvents

SEEN = "2026-11-02T10:00:00.5Z"


def manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec},
    }


def test_the_name_is_the_manifests_with_the_node_in_lower_case() -> None:
    assert static_pod_name("web", "Node-A") == "web-node-a"
    pod = static_pod(manifest(), "Node-A", "/etc/m/web.yaml", SEEN)
    assert full_name(pod) == ("default", "web-node-a")


def test_the_uid_is_a_hash_of_the_manifest_the_node_and_the_file() -> None:
    uid = static_pod_uid(manifest(), "n1", "/m/web.yaml")
    assert len(uid) == 32
    assert int(uid, 16) >= 0
    assert static_pod_uid(manifest(), "n1", "/m/web.yaml") == uid  # every read, every restart
    reordered = json.loads(json.dumps(manifest(), sort_keys=True))  # key order is no change
    assert static_pod_uid(reordered, "n1", "/m/web.yaml") == uid
    assert static_pod_uid(manifest(restartPolicy="Never"), "n1", "/m/web.yaml") != uid
    assert static_pod_uid(manifest(), "n2", "/m/web.yaml") != uid
    assert static_pod_uid(manifest(), "n1", "/m/other.yaml") != uid


def test_the_pod_has_the_kubelets_defaults_and_annotations() -> None:
    source = manifest(tolerations=[{"key": "k", "operator": "Exists"}])
    source["metadata"]["annotations"] = {"mine": "kept"}
    pod = static_pod(source, "n1", "/m/web.yaml", SEEN)
    meta = pod["metadata"]
    uid = static_pod_uid(source, "n1", "/m/web.yaml")
    assert meta["uid"] == uid
    assert meta["namespace"] == "default"
    assert meta["labels"] == {"app": "web"}
    assert meta["annotations"] == {
        "mine": "kept",
        CONFIG_HASH: uid,
        CONFIG_SEEN: SEEN,
        CONFIG_SOURCE: "file",
    }
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["spec"]["tolerations"] == [
        {"key": "k", "operator": "Exists"},
        {"operator": "Exists", "effect": "NoExecute"},
    ]
    assert pod["status"] == {"phase": "Pending"}
    assert source["metadata"]["name"] == "web"  # the manifest itself is left alone
    assert is_static_pod(pod)
    assert not is_mirror_pod(pod)
    assert static_hash(pod) == uid


def test_a_namespace_and_a_uid_of_the_manifests_own_are_kept() -> None:
    source = manifest()
    source["metadata"].update(namespace="kube-system", uid="given")
    pod = static_pod(source, "n1", "/m/web.yaml", SEEN)
    assert full_name(pod) == ("kube-system", "web-n1")
    assert pod["metadata"]["uid"] == pod["metadata"]["annotations"][CONFIG_HASH] == "given"


def test_the_toleration_is_added_once() -> None:
    source = manifest(tolerations=[{"operator": "Exists", "effect": "NoExecute"}])
    pod = static_pod(source, "n1", "/m/web.yaml", SEEN)
    assert pod["spec"]["tolerations"] == [{"operator": "Exists", "effect": "NoExecute"}]


def test_the_mirror_pod_is_the_static_pod_owned_by_its_node() -> None:
    pod = static_pod(manifest(), "n1", "/m/web.yaml", SEEN)
    mirror = mirror_pod(pod, "n1", "node-uid")
    uid = pod["metadata"]["uid"]
    assert mirror["metadata"]["annotations"] == {
        **pod["metadata"]["annotations"],
        CONFIG_MIRROR: uid,
    }
    assert mirror["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid", "controller": True}
    ]
    assert mirror["spec"] == pod["spec"]
    assert is_mirror_pod(mirror)
    assert mirror_hash(mirror) == uid
    assert CONFIG_MIRROR not in pod["metadata"]["annotations"]  # the static pod is unchanged
    api_pod = {"metadata": {"annotations": {CONFIG_SOURCE: "api"}}}
    assert not is_static_pod(api_pod)
    assert not is_static_pod({"metadata": {}})


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ([1, 2], "not an object"),
        ({"apiVersion": "apps/v1", "kind": "Deployment"}, "not a v1 Pod"),
        ({"apiVersion": "v1", "kind": "Pod", "spec": {}}, "metadata.name"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, "spec.containers"),
        (
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c"}]},
            },
            "a name and an image",
        ),
    ],
)
def test_a_manifest_that_is_no_pod_is_refused(bad: Any, why: str) -> None:
    with pytest.raises(ManifestError, match=why):
        validate_manifest(bad)


def test_the_seen_annotation_is_rfc3339_nano() -> None:
    assert seen_timestamp(datetime(2026, 1, 2, 3, 4, 5, 120000, UTC)) == "2026-01-02T03:04:05.12Z"
    assert seen_timestamp(datetime(2026, 1, 2, 3, 4, 5, 0, UTC)) == "2026-01-02T03:04:05Z"


def test_the_reader_takes_every_visible_file_and_skips_what_is_no_pod(tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  annotations:\n"
        "    day: 2026-01-02\nspec:\n  containers:\n  - name: c\n    image: nginx\n"
    )
    (tmp_path / "db.json").write_text(json.dumps(manifest()))
    (tmp_path / ".hidden.yaml").write_text(json.dumps(manifest()))
    (tmp_path / "broken.yaml").write_text("kind: [")
    (tmp_path / "deploy.yml").write_text("apiVersion: apps/v1\nkind: Deployment\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "nested.yaml").write_text(json.dumps(manifest()))
    reader = ManifestReader(tmp_path, "n1")
    read = reader.read()
    assert [Path(m.path).name for m in read] == ["db.json", "web.yaml"]
    web = read[1].pod
    assert web is not None
    assert web["metadata"]["annotations"]["day"] == "2026-01-02"  # a date stays text
    (tmp_path / "db.json").unlink()
    assert [Path(m.path).name for m in reader.read()] == ["web.yaml"]
    assert ManifestReader(tmp_path / "absent", "n1").read() == []
    assert [Path(m.path).name for m in ManifestReader(tmp_path / "web.yaml", "n1").read()] == [
        "web.yaml"
    ]


class _Writer:
    """The API's pod status as PodStatusWriter keeps it, in memory."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.writes = self.unchanged = 0

    def base(self, pod: dict[str, Any]) -> dict[str, Any]:
        return dict(pod.get("status") or {})

    def write(self, pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        self.sent.append((pod["metadata"]["uid"], status))
        return pod

    def has_written(self, uid: str) -> bool:
        return any(u == uid for u, _ in self.sent)

    def forget(self, uid: str) -> None:
        self.sent = [(u, s) for u, s in self.sent if u != uid]


def test_a_static_pods_status_goes_to_its_mirror() -> None:
    pod = static_pod(manifest(), "n1", "/m/web.yaml", SEEN)
    uid = pod["metadata"]["uid"]
    mirrors: dict[str, dict[str, Any]] = {}
    writer = _Writer()
    sink = MirrorStatus(writer, mirrors.get, lambda u: u == uid)  # type: ignore[arg-type]
    status = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    assert sink.write(pod, status) is None  # no mirror yet: kept, not sent
    assert writer.sent == []
    assert sink.has_written(uid)
    assert sink.base(pod) == status
    mirror = mirror_pod(pod, "n1", "node-uid")
    mirror["metadata"]["uid"] = "mirror-1"
    mirror["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    mirrors[uid] = mirror
    assert not sink.has_written(uid)
    assert sink.base(pod) == status  # a fresh mirror: what was said before is the base
    sink.write(pod, status)
    assert writer.sent == [("mirror-1", {**status, "qosClass": "BestEffort"})]
    assert sink.has_written(uid)
    sink.forget(uid)
    assert writer.sent == []
    api_pod = {"metadata": {"uid": "api-1"}, "status": {"phase": "Running"}}
    sink.write(api_pod, {"phase": "Succeeded"})
    assert writer.sent == [("api-1", {"phase": "Succeeded"})]


class _MirrorApi:
    """The API's pods as a node's mirror client sees them, in memory."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self._next = 0

    def create(self, pod: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        created = json.loads(json.dumps(pod))
        created["metadata"].update(uid=f"mirror-{self._next}", resourceVersion=str(self._next))
        self.pods[full_name(created)] = created
        self.calls.append(f"create {created['metadata']['uid']}")
        return created

    def delete(self, namespace: str, name: str, uid: str) -> None:
        held = self.pods.get((namespace, name))
        if held is not None and held["metadata"]["uid"] == uid:
            del self.pods[(namespace, name)]
        self.calls.append(f"delete {uid}")


@dataclass
class _Source:
    source: StaticPods
    api: _MirrorApi
    events: FakeEvents = field(default_factory=FakeEvents)
    index: dict[str, dict[str, Any]] = field(default_factory=dict)
    told: list[tuple[str, bool]] = field(default_factory=list)

    def on_pod(self, uid: str, pod: dict[str, Any] | None) -> None:
        self.told.append((uid, pod is not None))
        if pod is None:
            self.index.pop(uid, None)
        else:
            self.index[uid] = pod


def _source(directory: Path) -> _Source:
    node = {"metadata": {"name": "n1", "uid": "node-uid"}}
    made = _Source(None, _MirrorApi())  # type: ignore[arg-type]
    made.source = StaticPods(
        directory,
        "n1",
        made.api,  # type: ignore[arg-type]
        events=made.events,  # type: ignore[arg-type]
        on_pod=made.on_pod,
        wake=lambda _uid: None,
        node=lambda: node,
        known=lambda _uid: False,
        # not started: the tests run passes themselves
        timers=Timers(pool_threads=1, supervisor=Supervisor()),
    )
    return made


def _source_of_web(directory: Path) -> tuple[_Source, str]:
    """A source over `directory` holding web.json, after its first pass: and the pod's uid."""
    s = _source(directory)
    (directory / "web.json").write_text(json.dumps(manifest()))
    s.source.run_once()
    (uid,) = s.index
    return s, uid


def test_the_source_replaces_a_changed_pod_once_the_old_one_ended(tmp_path: Path) -> None:
    s, old = _source_of_web(tmp_path)
    source, api, index = s.source, s.api, s.index
    assert source.owns(old)
    mirror = api.pods[("default", "web-n1")]
    assert mirror["metadata"]["annotations"][CONFIG_MIRROR] == old
    assert source.mirror_of(old) == mirror
    seen = index[old]["metadata"]["annotations"][CONFIG_SEEN]
    source.run_once()  # nothing changed: nothing done, the first read's time kept
    assert s.told == [(old, True)]
    assert api.calls == ["create mirror-1"]
    assert index[old]["metadata"]["annotations"][CONFIG_SEEN] == seen

    (tmp_path / "web.json").write_text(json.dumps(manifest(restartPolicy="Never")))
    source.run_once()
    assert list(index) == [old]  # the new version waits for the old one's end
    assert index[old]["metadata"]["deletionTimestamp"]
    assert index[old]["metadata"]["deletionGracePeriodSeconds"] == 30
    assert api.calls == ["create mirror-1"]  # the old one's mirror stays while it stops
    source.finished(old)
    source.run_once()
    (new,) = index
    assert new != old
    assert not source.owns(old)
    assert api.calls == ["create mirror-1", "delete mirror-1", "create mirror-2"]
    assert source.mirror_of(new) == api.pods[("default", "web-n1")]


def test_the_source_makes_a_deleted_mirror_again_and_ends_a_removed_pod(tmp_path: Path) -> None:
    s, uid = _source_of_web(tmp_path)
    source, api, index = s.source, s.api, s.index
    # A user deletes the mirror: the watch tells it being deleted; it is made again.
    deleting = json.loads(json.dumps(api.pods[("default", "web-n1")]))
    deleting["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", resourceVersion="9")
    source.mirror_event("MODIFIED", deleting)
    source.run_once()
    assert api.calls == ["create mirror-1", "delete mirror-1", "create mirror-2"]
    assert s.told == [(uid, True)]

    (tmp_path / "web.json").unlink()
    source.run_once()
    assert index[uid]["metadata"]["deletionTimestamp"]
    assert api.calls[-1] == "create mirror-2"  # kept until the pod has stopped
    source.finished(uid)
    source.run_once()
    assert index == {}
    assert api.calls[-1] == "delete mirror-2"
    assert api.pods == {}


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [*{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}]\n"
    for a, b in zip("abcde", "bcdef", strict=True)
)


def test_yaml_aliases_are_refused_before_they_expand(tmp_path: Path) -> None:
    """A few hundred bytes of nested aliases (9^6 items here; the issue's cost 1.9 s and
    164 MiB on every pass) are refused where the first alias is met; the manifest beside
    it is read."""
    bomb = "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb}\nspec:\n"
    bomb += "  containers: [{name: c, image: nginx, args: *f}]\n"
    (tmp_path / "bomb.yaml").write_text(LAUGHS + bomb)
    (tmp_path / "web.json").write_text(json.dumps(manifest()))
    read = ManifestReader(tmp_path, "n1").read()
    assert read is not None
    assert [Path(m.path).name for m in read] == ["web.json"]


def test_a_bad_manifest_stops_no_other_static_pod(tmp_path: Path) -> None:
    """`annotations: [x]` once stopped every pass (and the node's start): each manifest is
    checked on its own, the bad one logged and skipped, the others run and update."""
    bad = manifest()
    bad["metadata"]["annotations"] = ["x"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    (tmp_path / "web.json").write_text(json.dumps(manifest()))
    s = _source(tmp_path)
    s.source.start()
    s.source.stop(1.0)
    (first,) = s.index
    (tmp_path / "web.json").write_text(json.dumps(manifest(restartPolicy="Never")))
    s.source.run_once()
    assert s.index[first]["metadata"].get("deletionTimestamp"), "the update goes on"


def test_two_manifests_of_one_name_tell_failed_validation_once(tmp_path: Path) -> None:
    """filterInvalidPods: the first file wins; the other gets the kubelet's Warning event,
    once (not on every one-second pass)."""
    (tmp_path / "a.json").write_text(json.dumps(manifest()))
    (tmp_path / "b.json").write_text(json.dumps(manifest(restartPolicy="Never")))
    s = _source(tmp_path)
    s.source.run_once()
    s.source.run_once()
    (kept,) = s.index
    assert s.index[kept]["spec"].get("restartPolicy") != "Never"
    (told,) = s.events.of("FailedValidation")
    assert told.type == "Warning"
    assert told.message == (
        f"Error validating pod web-n1_default({told.uid}) from file due to duplicate pod name"
        ' "web-n1", ignoring'
    )
    assert told.uid != kept


def test_a_directory_others_may_write_is_not_read_and_what_runs_is_kept(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir(mode=0o755)
    (manifests / "web.json").write_text(json.dumps(manifest()))
    s = _source(manifests)
    s.source.run_once()
    (uid,) = s.index
    manifests.chmod(0o777)  # anyone could now add a pod that runs as root
    (manifests / "web.json").unlink()
    (manifests / "db.json").write_text(json.dumps({**manifest(), "metadata": {"name": "db"}}))
    s.source.run_once()
    assert list(s.index) == [uid]
    assert not s.index[uid]["metadata"].get("deletionTimestamp"), "kept, not stopped"
    assert s.source._reader.read() is None
    manifests.chmod(0o755)
    s.source.run_once()
    assert [p["metadata"]["name"] for p in s.index.values()] == ["web-n1", "db-n1"]


def test_symlinks_and_files_others_may_write_are_not_read(tmp_path: Path) -> None:
    manifests, elsewhere = tmp_path / "manifests", tmp_path / "elsewhere"
    manifests.mkdir(mode=0o755)
    elsewhere.mkdir()
    (elsewhere / "pod.json").write_text(json.dumps(manifest()))
    (manifests / "linked.json").symlink_to(elsewhere / "pod.json")
    (manifests / "open.json").write_text(json.dumps(manifest()))
    (manifests / "open.json").chmod(0o666)
    (manifests / "web.json").write_text(json.dumps({**manifest(), "metadata": {"name": "ok"}}))
    read = ManifestReader(manifests, "n1").read()
    assert read is not None
    assert [Path(m.path).name for m in read] == ["web.json"]
