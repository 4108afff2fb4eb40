"""Pod volumes on disk: content, modes, errors as the kubelet words them, atomic updates, mounts."""

from __future__ import annotations

import base64
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from kubelet_sim import cri
from kubelet_sim.node.host import can_mount
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.spec import PodView
from kubelet_sim.volumes import VolumeError, VolumeManager, VolumeSetup, mounts_for
from kubelet_sim.volumes import subpath as subpath_module
from kubelet_sim.volumes.hostmount import mount_points_under
from tests.cluster import wait_for
from tests.docker_env import TEST_LABEL, DockerEnv
from tests.manifests import pod_manifest, served

UID = "0b7c5a9e-1111-2222-3333-444455556666"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Objects:
    """A fake object store behind the ObjectLookup the agent passes in."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}

    def put(self, kind: str, name: str, **fields: Any) -> None:
        self.items[kind, name] = {"metadata": {"name": name, "namespace": "ns"}, **fields}

    def lookup(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert namespace == "ns"
        return self.items.get((kind, name))


def make_pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]] | None = None) -> PodView:
    app = {"name": "app", "image": "busybox:1", "volumeMounts": mounts or []}
    body = pod_manifest(
        "web",
        [app],
        labels={"app": "web", "tier": 'front "end"'},
        annotations={"note": "line1\nline2"},
        serviceAccountName="builder",
        volumes=volumes,
    )
    return PodView.from_api(served(body, uid=UID))


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[VolumeManager]:
    """Mounts (tmpfs, subPath binds) when this process may; never leaves one behind."""
    manager = VolumeManager(tmp_path, allocatable=NODE, mount=can_mount())
    yield manager
    manager.teardown(UID)
    assert not mount_points_under(tmp_path)


@pytest.fixture
def on_disk(tmp_path: Path) -> VolumeManager:
    """A node that may not mount: everything stays on disk, subPaths are mounted by path."""
    return VolumeManager(tmp_path, allocatable=NODE, mount=False)


needs_mount = pytest.mark.skipif(not can_mount(), reason="needs CAP_SYS_ADMIN to mount")


@pytest.fixture
def objects() -> Objects:
    return Objects()


def run(manager: VolumeManager, objects: Objects, pod: PodView, token: Any = None) -> VolumeSetup:
    return manager.setup(pod, objects.lookup, token)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def visible(path: Path) -> set[str]:
    return {p.name for p in path.iterdir() if not p.name.startswith("..")}


# --- configMap -----------------------------------------------------------------------------


def test_config_map_files_are_symlinks_into_data_with_default_mode(
    manager: VolumeManager, objects: Objects, tmp_path: Path
) -> None:
    objects.put("ConfigMap", "cfg", data={"a.conf": "x=1"}, binaryData={"blob": b64("\x00\x01")})
    setup = run(manager, objects, make_pod([{"name": "c", "configMap": {"name": "cfg"}}]))

    assert setup.ok
    assert setup.errors == []
    path = setup.paths["c"]
    assert path == tmp_path / "pods" / UID / "volumes" / "kubernetes.io~configmap" / "c"
    assert visible(path) == {"a.conf", "blob"}
    assert (path / "a.conf").read_text() == "x=1"
    assert (path / "blob").read_bytes() == b"\x00\x01"
    assert os.readlink(path / "a.conf") == "..data/a.conf"
    ts_dir = os.readlink(path / "..data")
    assert ts_dir.startswith("..20")
    assert mode(path / "a.conf") == 0o644
    assert mode(path) == 0o755
    assert mode(path / ts_dir) == 0o755
    assert "c" in setup.read_only


def test_config_map_items_modes_and_nested_paths(manager: VolumeManager, objects: Objects) -> None:
    objects.put("ConfigMap", "cfg", data={"a": "A", "b": "B", "unused": "U"})
    source = {
        "name": "cfg",
        "defaultMode": 0o400,
        "items": [{"key": "a", "path": "conf/app.ini", "mode": 0o640}, {"key": "b", "path": "b"}],
    }
    setup = run(manager, objects, make_pod([{"name": "c", "configMap": source}]))

    path = setup.paths["c"]
    assert visible(path) == {"conf", "b"}
    assert (path / "conf" / "app.ini").read_text() == "A"
    assert mode(path / "conf" / "app.ini") == 0o640
    assert mode(path / "b") == 0o400
    assert mode(path / "..data" / "conf") == 0o755


def test_missing_config_map_fails_mount_with_kubelet_message(
    manager: VolumeManager, objects: Objects
) -> None:
    setup = run(manager, objects, make_pod([{"name": "cfg", "configMap": {"name": "missing"}}]))

    assert not setup.ok
    assert setup.errors == [
        'MountVolume.SetUp failed for volume "cfg" : configmap "missing" not found'
    ]
    assert "cfg" not in setup.paths


def test_optional_missing_config_map_gives_empty_volume(
    manager: VolumeManager, objects: Objects
) -> None:
    volume = {"name": "cfg", "configMap": {"name": "missing", "optional": True}}
    setup = run(manager, objects, make_pod([volume]))

    assert setup.ok
    assert visible(setup.paths["cfg"]) == set()
    assert (setup.paths["cfg"] / "..data").is_symlink()


def test_missing_key_in_items_fails_unless_optional(
    manager: VolumeManager, objects: Objects
) -> None:
    objects.put("ConfigMap", "cfg", data={"a": "A"})
    items = [{"key": "a", "path": "a"}, {"key": "nope", "path": "n"}]
    failed = run(
        manager, objects, make_pod([{"name": "v", "configMap": {"name": "cfg", "items": items}}])
    )
    optional = {"name": "cfg", "items": items, "optional": True}
    passed = run(manager, objects, make_pod([{"name": "v", "configMap": optional}]))

    assert failed.errors == [
        'MountVolume.SetUp failed for volume "v" : '
        "configmap references non-existent config key: nope"
    ]
    assert passed.ok
    assert visible(passed.paths["v"]) == {"a"}


def test_item_path_may_not_leave_the_volume(manager: VolumeManager, objects: Objects) -> None:
    objects.put("ConfigMap", "cfg", data={"a": "A"})
    items = [{"key": "a", "path": "../evil"}]
    setup = run(
        manager, objects, make_pod([{"name": "v", "configMap": {"name": "cfg", "items": items}}])
    )

    assert setup.errors == [
        "MountVolume.SetUp failed for volume \"v\" : invalid path: must not contain '..': ../evil"
    ]


# --- secret --------------------------------------------------------------------------------


def test_secret_values_are_decoded_with_default_mode(
    manager: VolumeManager, objects: Objects
) -> None:
    objects.put("Secret", "creds", data={"user": b64("admin"), "pass": b64("s3cr3t")})
    volume = {"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o440}}
    setup = run(manager, objects, make_pod([volume]))

    path = setup.paths["s"]
    assert path.parent.name == "kubernetes.io~secret"
    assert (path / "user").read_text() == "admin"
    assert (path / "pass").read_text() == "s3cr3t"
    assert mode(path / "pass") == 0o440
    assert "s" in setup.read_only


def test_secret_errors_use_kubelet_wording(manager: VolumeManager, objects: Objects) -> None:
    objects.put("Secret", "creds", data={"user": b64("admin")})
    missing_key = {"secretName": "creds", "items": [{"key": "token", "path": "t"}]}
    setup = run(
        manager,
        objects,
        make_pod(
            [
                {"name": "gone", "secret": {"secretName": "absent"}},
                {"name": "key", "secret": missing_key},
                {"name": "opt", "secret": {"secretName": "absent", "optional": True}},
            ]
        ),
    )

    assert setup.errors == [
        'MountVolume.SetUp failed for volume "gone" : secret "absent" not found',
        'MountVolume.SetUp failed for volume "key" : references non-existent secret key: token',
    ]
    assert set(setup.paths) == {"opt"}


def test_secret_volume_logs_names_never_values(manager: VolumeManager, objects: Objects) -> None:
    objects.put("Secret", "creds", data={"pass": b64("hunter2-value")})
    with structlog.testing.capture_logs() as logs:
        run(manager, objects, make_pod([{"name": "s", "secret": {"secretName": "creds"}}]))

    assert [entry["volume"] for entry in logs] == ["s"]
    assert "hunter2" not in repr(logs)


# --- downward API --------------------------------------------------------------------------


def test_downward_api_files(manager: VolumeManager, objects: Objects) -> None:
    items = [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}},
        {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}, "mode": 0o600},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
    ]
    setup = run(manager, objects, make_pod([{"name": "info", "downwardAPI": {"items": items}}]))

    path = setup.paths["info"]
    assert path.parent.name == "kubernetes.io~downward-api"
    assert (path / "name").read_text() == "web"
    assert (path / "ns").read_text() == "ns"
    assert (path / "uid").read_text() == UID
    assert mode(path / "uid") == 0o600
    assert mode(path / "name") == 0o644
    assert (path / "labels").read_text() == 'app="web"\ntier="front \\"end\\""'
    assert (path / "annotations").read_text() == 'note="line1\\nline2"'
    assert (path / "app").read_text() == "web"


def test_downward_api_unsupported_field(manager: VolumeManager, objects: Objects) -> None:
    items = [{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}]
    setup = run(manager, objects, make_pod([{"name": "info", "downwardAPI": {"items": items}}]))

    assert setup.errors == [
        'MountVolume.SetUp failed for volume "info" : unsupported fieldPath: status.podIP'
    ]


def resource_item(path: str, resource: str, divisor: str | None = None) -> dict[str, Any]:
    selector = {"containerName": "app", "resource": resource}
    return {"path": path, "resourceFieldRef": selector | ({"divisor": divisor} if divisor else {})}


RESOURCE_ITEMS = [
    resource_item("cpu_limit", "limits.cpu"),
    resource_item("cpu_limit_m", "limits.cpu", "1m"),
    resource_item("cpu_request", "requests.cpu"),
    resource_item("memory_limit", "limits.memory"),
    resource_item("memory_limit_mi", "limits.memory", "1Mi"),
    resource_item("memory_request", "requests.memory"),
]
NODE = Allocatable(cpu_milli=3500, memory_bytes=8 * 2**30, pods=110, ephemeral_storage_bytes=10**10)


@pytest.mark.parametrize("kind", ["downwardAPI", "projected"])
def test_downward_api_resource_files(tmp_path: Path, objects: Objects, kind: str) -> None:
    """The container's resources, an unset limit read as the node's allocatable."""
    manager = VolumeManager(tmp_path, allocatable=NODE, mount=False)
    source: dict[str, Any] = {"items": RESOURCE_ITEMS}
    if kind == "projected":
        source = {"sources": [{"downwardAPI": source}]}
    pod = make_pod([{"name": "info", kind: source}])
    path = run(manager, objects, pod).paths["info"]
    files = {name: (path / name).read_text() for name in visible(path)}
    assert files == {
        "cpu_limit": "4",
        "cpu_limit_m": "3500",
        "cpu_request": "0",
        "memory_limit": str(8 * 2**30),
        "memory_limit_mi": "8192",
        "memory_request": "0",
    }
    pod.raw["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "1250m", "memory": "64Mi"},
        "requests": {"cpu": "250m", "memory": "32Mi"},
    }
    assert run(manager, objects, pod).ok
    files = {name: (path / name).read_text() for name in visible(path)}
    assert files == {
        "cpu_limit": "2",
        "cpu_limit_m": "1250",
        "cpu_request": "1",
        "memory_limit": "67108864",
        "memory_limit_mi": "64",
        "memory_request": "33554432",
    }


def test_downward_api_resource_errors_fail_the_mount(
    manager: VolumeManager, objects: Objects
) -> None:
    items = [
        {"path": "a", "resourceFieldRef": {"containerName": "nope", "resource": "limits.cpu"}},
        {"path": "b", "resourceFieldRef": {"containerName": "app", "resource": "limits.gpu"}},
    ]
    setup = run(manager, objects, make_pod([{"name": "info", "downwardAPI": {"items": items}}]))
    assert setup.errors == [
        'MountVolume.SetUp failed for volume "info" : '
        "[container nope not found, unsupported container resource : limits.gpu]"
    ]


# --- projected -----------------------------------------------------------------------------


class Tokens:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, list[str]]] = []

    def __call__(self, namespace: str, account: str, expiration: int, audiences: list[str]) -> str:
        self.calls.append((namespace, account, expiration, audiences))
        return f"token-{len(self.calls)}"


def test_projected_sources_share_one_directory(manager: VolumeManager, objects: Objects) -> None:
    objects.put("ConfigMap", "cfg", data={"ca.crt": "CERT"})
    objects.put("Secret", "creds", data={"pass": b64("pw")})
    sources = [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 600, "audience": "vault"}},
        {"configMap": {"name": "cfg"}},
        {"secret": {"name": "creds", "items": [{"key": "pass", "path": "sec/pass"}]}},
        {
            "downwardAPI": {
                "items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]
            }
        },
    ]
    tokens = Tokens()
    setup = run(
        manager, objects, make_pod([{"name": "p", "projected": {"sources": sources}}]), tokens
    )

    path = setup.paths["p"]
    assert setup.ok
    assert path.parent.name == "kubernetes.io~projected"
    assert visible(path) == {"token", "ca.crt", "sec", "ns"}
    assert (path / "token").read_text() == "token-1"
    assert (path / "sec" / "pass").read_text() == "pw"
    assert (path / "ns").read_text() == "ns"
    assert {mode(path / f) for f in ("token", "ca.crt", "ns")} == {0o644}
    assert tokens.calls == [("ns", "builder", 600, ["vault"])]
    assert "p" in setup.read_only


def test_projected_token_defaults_and_default_mode(
    manager: VolumeManager, objects: Objects
) -> None:
    sources = [{"serviceAccountToken": {"path": "token"}}]
    tokens = Tokens()
    volume = {"name": "p", "projected": {"sources": sources, "defaultMode": 0o600}}
    setup = run(manager, objects, make_pod([volume]), tokens)

    assert tokens.calls == [("ns", "builder", 3600, [])]
    assert mode(setup.paths["p"] / "token") == 0o600


def test_projected_reports_every_failing_source(manager: VolumeManager, objects: Objects) -> None:
    def failing(*_: Any) -> str:
        raise RuntimeError("token request refused")

    sources = [
        {"configMap": {"name": "nocm"}},
        {"secret": {"name": "nosecret"}},
        {"serviceAccountToken": {"path": "token"}},
    ]
    setup = run(
        manager, objects, make_pod([{"name": "p", "projected": {"sources": sources}}]), failing
    )

    assert setup.errors == [
        'MountVolume.SetUp failed for volume "p" : [configmap "nocm" not found, '
        'secret "nosecret" not found, token request refused]'
    ]


# --- updates -------------------------------------------------------------------------------


def test_resync_swaps_data_link_and_prunes_removed_keys(
    manager: VolumeManager, objects: Objects
) -> None:
    objects.put("ConfigMap", "cfg", data={"keep": "1", "drop": "x"})
    pod = make_pod([{"name": "c", "configMap": {"name": "cfg"}}])
    path = run(manager, objects, pod).paths["c"]
    first = os.readlink(path / "..data")

    objects.put("ConfigMap", "cfg", data={"keep": "2", "new": "n"})
    assert run(manager, objects, pod).ok
    second = os.readlink(path / "..data")

    assert second != first
    assert not (path / first).exists()
    assert visible(path) == {"keep", "new"}
    assert (path / "keep").read_text() == "2"
    assert (path / "new").read_text() == "n"
    assert not (path / "..data_tmp").exists()


def test_resync_without_changes_rewrites_nothing(manager: VolumeManager, objects: Objects) -> None:
    objects.put("ConfigMap", "cfg", data={"a": "1"})
    pod = make_pod([{"name": "c", "configMap": {"name": "cfg"}}])
    path = run(manager, objects, pod).paths["c"]
    first = os.readlink(path / "..data")

    assert run(manager, objects, pod).ok
    assert os.readlink(path / "..data") == first
    assert sorted(p.name for p in path.iterdir()) == sorted(["a", "..data", first])


def test_config_map_created_later_is_picked_up_on_resync(
    manager: VolumeManager, objects: Objects
) -> None:
    pod = make_pod([{"name": "c", "configMap": {"name": "late"}}])
    assert not run(manager, objects, pod).ok

    objects.put("ConfigMap", "late", data={"a": "1"})
    setup = run(manager, objects, pod)
    assert setup.ok
    assert (setup.paths["c"] / "a").read_text() == "1"


# --- emptyDir, hostPath, unsupported ---------------------------------------------------------


def test_empty_dir_is_world_writable_and_memory_is_dockers_tmpfs_without_mount_rights(
    on_disk: VolumeManager, objects: Objects
) -> None:
    pod = make_pod(
        [{"name": "scratch", "emptyDir": {}}, {"name": "ram", "emptyDir": {"medium": "Memory"}}],
        [{"name": "scratch", "mountPath": "/scratch"}, {"name": "ram", "mountPath": "/ram"}],
    )
    setup = run(on_disk, objects, pod)

    assert setup.paths["scratch"].parent.name == "kubernetes.io~empty-dir"
    assert mode(setup.paths["scratch"]) == 0o777
    assert mounts_for(pod.containers[0], setup) == [
        cri.Mount(str(setup.paths["scratch"]), "/scratch"),
        cri.Mount(str(setup.paths["ram"]), "/ram", tmpfs=True),
    ]


def test_empty_dir_content_survives_resync(manager: VolumeManager, objects: Objects) -> None:
    pod = make_pod([{"name": "scratch", "emptyDir": {}}])
    (run(manager, objects, pod).paths["scratch"] / "f").write_text("kept")

    assert (run(manager, objects, pod).paths["scratch"] / "f").read_text() == "kept"


def test_host_path_types(manager: VolumeManager, objects: Objects, tmp_path: Path) -> None:
    created = tmp_path / "node" / "data"
    setup = run(
        manager,
        objects,
        make_pod(
            [
                {"name": "made", "hostPath": {"path": str(created), "type": "DirectoryOrCreate"}},
                {"name": "plain", "hostPath": {"path": str(tmp_path / "whatever")}},
                {"name": "dir", "hostPath": {"path": str(tmp_path / "nope"), "type": "Directory"}},
            ]
        ),
    )

    assert created.is_dir()
    assert mode(created) == 0o755
    assert setup.paths["made"] == created
    assert setup.paths["plain"] == tmp_path / "whatever"
    assert setup.errors == [
        f'MountVolume.SetUp failed for volume "dir" : '
        f"hostPath type check failed: {tmp_path / 'nope'} is not a directory"
    ]


def test_unsupported_volume_type_is_a_mount_error_not_a_crash(
    manager: VolumeManager, objects: Objects
) -> None:
    pod = make_pod(
        [
            {"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}},
            {"name": "e", "emptyDir": {}},
        ]
    )
    setup = run(manager, objects, pod)

    assert setup.errors == [
        'MountVolume.SetUp failed for volume "data" : '
        "volume type persistentVolumeClaim is not supported by kubelet-sim"
    ]
    assert set(setup.paths) == {"e"}


# --- mounts --------------------------------------------------------------------------------


def test_mounts_honour_read_only_and_sub_path(on_disk: VolumeManager, objects: Objects) -> None:
    """On a node that may not mount, a subPath is the checked path itself."""
    manager = on_disk
    objects.put("ConfigMap", "cfg", data={"app.ini": "A"})
    pod = make_pod(
        [{"name": "c", "configMap": {"name": "cfg"}}, {"name": "e", "emptyDir": {}}],
        [
            {"name": "c", "mountPath": "/etc/app"},
            {"name": "c", "mountPath": "/etc/app.ini", "subPath": "app.ini"},
            {"name": "e", "mountPath": "/data", "readOnly": True},
            {"name": "e", "mountPath": "/logs", "subPath": "logs/app"},
        ],
    )
    setup = run(manager, objects, pod)
    cfg, scratch = setup.paths["c"], setup.paths["e"]
    ts_dir = os.readlink(cfg / "..data")

    assert mounts_for(pod.containers[0], setup) == [
        cri.Mount(str(cfg), "/etc/app", read_only=True),
        cri.Mount(str(cfg / ts_dir / "app.ini"), "/etc/app.ini", read_only=True),
        cri.Mount(str(scratch), "/data", read_only=True),
        cri.Mount(str(scratch / "logs" / "app"), "/logs"),
    ]
    assert mode(scratch / "logs" / "app") == 0o777


@pytest.mark.parametrize(
    ("mount", "message"),
    [
        ({"name": "x", "mountPath": "/x"}, "cannot find volume 'x' to mount into container 'app'"),
        (
            {"name": "e", "mountPath": "/x", "subPath": "/etc"},
            "error SubPath `/etc` must not be an absolute path",
        ),
        (
            {"name": "e", "mountPath": "/x", "subPath": "a/../.."},
            "unable to provision SubPath `a/../..`: must not contain '..'",
        ),
        (
            {"name": "e", "mountPath": "/x", "subPath": "escape"},
            'failed to prepare subPath for volumeMount "e" of container "app"',
        ),
        (
            {"name": "e", "mountPath": "/x", "subPath": "escape/new"},
            'failed to create subPath directory for volumeMount "e" of container "app"',
        ),
    ],
)
def test_bad_mounts_are_refused(
    manager: VolumeManager, objects: Objects, mount: dict[str, Any], message: str
) -> None:
    pod = make_pod([{"name": "e", "emptyDir": {}}], [mount])
    setup = run(manager, objects, pod)
    os.symlink("/etc", setup.paths["e"] / "escape")  # what a container could plant

    with pytest.raises(VolumeError, match=re.escape(message)):
        mounts_for(pod.containers[0], setup)


@needs_mount
def test_sub_path_is_a_bind_mount_of_what_was_opened(
    manager: VolumeManager, objects: Objects, tmp_path: Path
) -> None:
    pod = make_pod(
        [{"name": "e", "emptyDir": {}}],
        [{"name": "e", "mountPath": "/x", "subPath": "conf/app.ini"}],
    )
    setup = run(manager, objects, pod)
    source = setup.paths["e"] / "conf" / "app.ini"
    source.parent.mkdir()
    source.write_text("mine")

    [mount] = mounts_for(pod.containers[0], setup)

    staged = tmp_path / "pods" / UID / "volume-subpaths" / "e" / "app" / "0"
    assert mount.host_path == str(staged)
    assert staged in mount_points_under(staged)
    assert (staged.stat().st_dev, staged.stat().st_ino) == (
        source.stat().st_dev,
        source.stat().st_ino,
    )
    # What a container does later to the name cannot change what is mounted.
    source.unlink()
    source.symlink_to("/etc/hostname")
    assert staged.read_text() == "mine"
    with pytest.raises(VolumeError):  # the next start of the container: the name is refused
        mounts_for(pod.containers[0], setup)
    assert staged.read_text() == "mine"


@needs_mount
def test_a_symlink_swapped_in_after_the_check_is_refused(
    manager: VolumeManager, objects: Objects, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the subPath resolves inside the volume, then a container swaps a directory on
    the way for a symlink to the host's /etc before the agent opens it."""
    pod = make_pod(
        [{"name": "e", "emptyDir": {}}],
        [{"name": "e", "mountPath": "/x", "subPath": "data/passwd"}],
    )
    setup = run(manager, objects, pod)
    data = setup.paths["e"] / "data"
    data.mkdir()
    (data / "passwd").write_text("the pod's own")
    resolve = subpath_module.resolve_within

    def resolve_then_swap(base: Path, path: Path, what: str = "path") -> Path:
        checked = resolve(base, path, what)
        data.rename(setup.paths["e"] / "moved")
        data.symlink_to("/etc")
        return checked

    monkeypatch.setattr(subpath_module, "resolve_within", resolve_then_swap)

    with pytest.raises(VolumeError) as refused:
        mounts_for(pod.containers[0], setup)
    assert str(refused.value) == 'failed to prepare subPath for volumeMount "e" of container "app"'
    assert mount_points_under(tmp_path) == [], "nothing of the host was mounted"


def test_dirs_are_private_whatever_the_umask(
    manager: VolumeManager, objects: Objects, tmp_path: Path
) -> None:
    objects.put("Secret", "creds", data={"pass": b64("s3cr3t")})
    old = os.umask(0)
    try:
        run(manager, objects, make_pod([{"name": "s", "secret": {"secretName": "creds"}}]))
    finally:
        os.umask(old)

    assert mode(tmp_path) == 0o700
    assert mode(tmp_path / "pods") == 0o750
    assert mode(tmp_path / "pods" / UID) == 0o750
    assert mode(tmp_path / "pods" / UID / "volumes") == 0o750


def _mount_of(path: Path) -> tuple[str, str] | None:
    """(fstype, super options) of the mount at `path`, from /proc/self/mountinfo."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        if before.split()[4] == str(path):
            fstype, _source, options = after.split()
            return fstype, options
    return None


@needs_mount
def test_memory_empty_dir_is_a_node_tmpfs_for_the_pods_lifetime(
    manager: VolumeManager, objects: Objects
) -> None:
    """Mounted on the node (not per container by Docker), so its files outlive a container;
    sized by sizeLimit when smaller than the pod's share (calculateEmptyDirMemorySize)."""
    pod = make_pod(
        [{"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}],
        [{"name": "ram", "mountPath": "/ram"}],
    )
    setup = run(manager, objects, pod)
    assert setup.ok, setup.errors
    path = setup.paths["ram"]
    mounted = _mount_of(path)
    assert mounted is not None
    assert mounted[0] == "tmpfs"
    assert "size=1024k" in mounted[1]
    assert mode(path) == 0o1777
    assert mounts_for(pod.containers[0], setup)[0].tmpfs is False, "a bind of the node's tmpfs"
    (path / "f").write_text("kept")
    assert (run(manager, objects, pod).paths["ram"] / "f").read_text() == "kept"
    assert len(mount_points_under(path.parent)) == 1


@needs_mount
def test_secret_and_token_volumes_are_tmpfs_and_go_with_the_pod(
    manager: VolumeManager, objects: Objects, tmp_path: Path
) -> None:
    objects.put("Secret", "creds", data={"user": b64("admin"), "pass": b64("s3cr3t")})
    secret = {
        "secretName": "creds",
        "defaultMode": 0o400,
        "items": [{"key": "user", "path": "user"}, {"key": "pass", "path": "pass", "mode": 0o440}],
    }
    token = {"sources": [{"serviceAccountToken": {"path": "token"}}]}
    pod = make_pod(
        [
            {"name": "s", "secret": secret},
            {"name": "t", "projected": token},
            {"name": "c", "configMap": {"name": "cfg", "optional": True}},
        ]
    )
    setup = run(manager, objects, pod, token=lambda *_: "jwt")
    assert setup.ok, setup.errors

    for name in ("s", "t"):
        mounted = _mount_of(setup.paths[name])
        assert mounted is not None, name
        assert mounted[0] == "tmpfs", name
        assert f"size={manager.memory_bytes // 1024}k" in mounted[1]
        assert mode(setup.paths[name]) == 0o1777  # the tmpfs root, as the kubelet's
    assert _mount_of(setup.paths["c"]) is None, "configMap volumes stay on disk, as upstream"
    assert mode(setup.paths["s"] / "user") == 0o400
    assert mode(setup.paths["s"] / "pass") == 0o440
    assert mode(setup.paths["t"] / "token") == 0o644
    assert run(manager, objects, pod, token=lambda *_: "jwt").ok  # again: no second mount
    assert len(mount_points_under(tmp_path)) == 2

    assert manager.teardown(UID)
    assert mount_points_under(tmp_path) == []
    assert not (tmp_path / "pods" / UID / "volumes").exists()


def test_without_mount_rights_secrets_stay_on_disk(
    on_disk: VolumeManager, objects: Objects
) -> None:
    objects.put("Secret", "creds", data={"pass": b64("s3cr3t")})
    setup = run(on_disk, objects, make_pod([{"name": "s", "secret": {"secretName": "creds"}}]))

    assert _mount_of(setup.paths["s"]) is None
    assert mode(setup.paths["s"]) == 0o755
    assert mode(setup.paths["s"] / "pass") == 0o644
    assert setup.subpath_staging is None


def test_teardown_removes_the_pods_volumes(
    manager: VolumeManager, objects: Objects, tmp_path: Path
) -> None:
    objects.put("ConfigMap", "cfg", data={"a": "1"})
    host = tmp_path / "host"
    pod = make_pod(
        [
            {"name": "c", "configMap": {"name": "cfg"}},
            {"name": "e", "emptyDir": {}},
            {"name": "h", "hostPath": {"path": str(host), "type": "DirectoryOrCreate"}},
        ]
    )
    run(manager, objects, pod)

    manager.teardown(UID)

    assert not (tmp_path / "pods" / UID / "volumes").exists()
    assert host.is_dir()
    manager.teardown(UID)  # idempotent


# --- a real container ------------------------------------------------------------------------


@pytest.mark.docker
def test_config_map_update_reaches_a_running_container(
    manager: VolumeManager, objects: Objects, docker_env: DockerEnv, request: pytest.FixtureRequest
) -> None:
    objects.put("ConfigMap", "cfg", data={"greeting": "hello"})
    pod = make_pod(
        [{"name": "c", "configMap": {"name": "cfg"}}], [{"name": "c", "mountPath": "/etc/cfg"}]
    )
    [mount] = mounts_for(pod.containers[0], run(manager, objects, pod))
    container = docker_env.client.containers.run(
        docker_env.busybox_image,
        ["sleep", "3600"],
        detach=True,
        remove=False,
        user="65534",  # a non-root reader, as most pods run
        labels={TEST_LABEL: request.node.nodeid},
        volumes={mount.host_path: {"bind": mount.container_path, "mode": "ro"}},
    )

    def read() -> str:
        result = container.exec_run(["cat", "/etc/cfg/greeting"])
        output = result.output
        return output.decode() if isinstance(output, bytes) and result.exit_code == 0 else ""

    assert wait_for(read, timeout=15, message="the configMap file in the container") == "hello"
    objects.put("ConfigMap", "cfg", data={"greeting": "bye"})
    assert run(manager, objects, pod).ok
    wait_for(lambda: read() == "bye", timeout=15, message="the update inside the container")
    assert container.exec_run(["touch", "/etc/cfg/x"]).exit_code != 0


def test_an_owned_empty_dir_keeps_its_setgid_on_every_setup(
    manager: VolumeManager, objects: Objects
) -> None:
    """Each sync sets the volumes up again: the fsGroup's setgid directory must stay 2777 (a
    second setup used to chmod it back to 0777 and, its group already right, not own it again)."""
    pod = make_pod([{"name": "e", "emptyDir": {}}])
    pod.raw["spec"]["securityContext"] = {"fsGroup": 3000}
    for _ in range(2):
        path = run(manager, objects, pod).paths["e"]
        assert (mode(path), path.stat().st_gid) == (0o2777, 3000)


@needs_mount
def test_a_memory_empty_dir_whose_size_limit_is_no_quantity_fails_its_mount(
    manager: VolumeManager, objects: Objects
) -> None:
    """A static pod's manifest reaches us unvalidated: the volume fails, the sync goes on."""
    pod = make_pod([{"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "lots"}}])
    setup = run(manager, objects, pod)
    assert not setup.ok
    assert "sizeLimit 'lots'" in setup.errors[0]
