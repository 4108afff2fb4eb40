"""Finding and downloading the control plane's binaries, against a file server on loopback.

No network beyond 127.0.0.1: the "releases" are a few KB of random bytes served by a
ThreadingHTTPServer made here, laid out as dl.k8s.io and etcd's GitHub releases lay them out.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kubelet_sim.controlplane import binaries
from kubelet_sim.controlplane.binaries import (
    DEFAULT_KUBE_VERSION,
    KUBE_COMPONENTS,
    Binaries,
    BinariesMissing,
    DownloadError,
    cache_dir,
    download,
    find_binaries,
    progress_bar,
)

VERSION = "1.31.4"
ETCD = "3.5.17"  # ETCD_FOR_KUBE["1.31"]: the tests rely on the mapping to pick it
ALL = (*KUBE_COMPONENTS, "etcd")


@dataclass
class Release:
    """What the server serves (path -> body), and which paths drop their connection."""

    files: dict[str, bytes] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    unsized: set[str] = field(default_factory=set)  # sent without Content-Length
    requests: list[str] = field(default_factory=list)
    url: str = ""
    content: dict[str, bytes] = field(default_factory=dict)  # the binaries, by name

    @property
    def kube_url(self) -> str:
        return f"{self.url}/kube"

    @property
    def etcd_url(self) -> str:
        return f"{self.url}/etcd"

    def add_kube(self, version: str = VERSION, arch: str = "amd64") -> None:
        for name in KUBE_COMPONENTS:
            body = self.content.setdefault(name, os.urandom(4096))
            path = f"/kube/v{version}/bin/linux/{arch}/{name}"
            self.files[path] = body
            self.files[path + ".sha256"] = hashlib.sha256(body).hexdigest().encode()

    def add_etcd(
        self,
        etcd: str = ETCD,
        arch: str = "amd64",
        extra: tarfile.TarInfo | None = None,
        with_etcd: bool = True,
    ) -> None:
        """The tarball as etcd publishes it; `extra` adds a member (an attack)."""
        stem = f"etcd-v{etcd}-linux-{arch}"
        body = self.content.setdefault(
            "etcd", b"#!/bin/sh\necho etcd " + os.urandom(8).hex().encode()
        )
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            members = [(f"{stem}/README.md", b"etcd\n")] + [(f"{stem}/etcd", body)] * with_etcd
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
            if extra is not None:
                tar.addfile(extra)
        tarball = buf.getvalue()
        self.files[f"/etcd/v{etcd}/{stem}.tar.gz"] = tarball
        sums = f"{'0' * 64}  etcd-v{etcd}-darwin-arm64.zip\n"
        sums += f"{hashlib.sha256(tarball).hexdigest()}  {stem}.tar.gz\n"
        self.files[f"/etcd/v{etcd}/SHA256SUMS"] = sums.encode()


@pytest.fixture
def release() -> Iterator[Release]:
    rel = Release()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            rel.requests.append(self.path)
            body = rel.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            if self.path in rel.dropped:  # promise 100000 bytes, send 1000, hang up
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self.wfile.write(body[:1000])
                self.close_connection = True
                return
            if (
                self.path not in rel.unsized
            ):  # else HTTP/1.0: the body ends when the connection does
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rel.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    rel.add_kube()
    rel.add_etcd()
    try:
        yield rel
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def fetch(rel: Release, dest: Path, progress: binaries.Progress | None = None) -> Path:
    return download(
        VERSION,
        dest=dest,
        kube_base_url=rel.kube_url,
        etcd_base_url=rel.etcd_url,
        arch="amd64",
        progress=progress,
    )


def listing(root: Path) -> list[tuple[str, bytes | None]]:
    """Everything under root (files with their bytes): what a failed download must not change."""
    return sorted(
        (str(p.relative_to(root)), p.read_bytes() if p.is_file() else None) for p in root.rglob("*")
    )


def test_download_lands_five_verified_executables(release: Release, tmp_path: Path) -> None:
    calls: list[tuple[str, int, int | None]] = []
    dest = fetch(release, tmp_path / "cache" / VERSION, progress=lambda *a: calls.append(a))

    assert dest == tmp_path / "cache" / VERSION
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755  # not mkdtemp's 0700
    assert sorted(p.name for p in dest.iterdir()) == sorted(ALL)
    for name in ALL:
        assert (dest / name).read_bytes() == release.content[name], name
        assert stat.S_IMODE((dest / name).stat().st_mode) == 0o755, name
    assert os.listdir(tmp_path / "cache") == [VERSION]  # no partial directory left behind
    assert f"/etcd/v{ETCD}/etcd-v{ETCD}-linux-amd64.tar.gz" in release.requests
    tarball = release.files[f"/etcd/v{ETCD}/etcd-v{ETCD}-linux-amd64.tar.gz"]
    for name in ALL:  # progress from 0 to the whole file (etcd's: the tarball), for each
        size = len(tarball if name == "etcd" else release.content[name])
        mine = [c for c in calls if c[0] == name]
        assert mine[0] == (name, 0, size)
        assert mine[-1] == (name, size, size)

    found = find_binaries(dest, env={"PATH": "", "HOME": str(tmp_path / "home")})
    assert found == Binaries(
        dest / "kube-apiserver",
        dest / "etcd",
        dest / "kube-controller-manager",
        dest / "kube-scheduler",
        dest / "kubectl",
    )


def test_download_defaults_from_environment(
    release: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mirrors (and these tests) set the base URLs by environment; dest defaults to the cache."""
    monkeypatch.setenv("KUBELET_SIM_KUBE_DOWNLOAD_URL", release.kube_url + "/")
    monkeypatch.setenv("KUBELET_SIM_ETCD_DOWNLOAD_URL", release.etcd_url)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    release.add_kube(arch="arm64")
    release.add_etcd(arch="arm64")

    dest = download("v" + VERSION)

    assert dest == tmp_path / "xdg" / "kubelet-sim" / "kube-bin" / VERSION
    assert (dest / "etcd").read_bytes() == release.content["etcd"]
    assert all("/arm64/" in p or "arm64.tar" in p for p in release.requests if "SHA256" not in p)


def test_unknown_machine_is_refused_before_any_request(
    release: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("platform.machine", lambda: "riscv64")
    with pytest.raises(DownloadError, match="riscv64"):
        download(
            VERSION,
            dest=tmp_path / VERSION,
            kube_base_url=release.kube_url,
            etcd_base_url=release.etcd_url,
        )
    assert release.requests == []


@pytest.mark.parametrize("version", ["../1.31.4", "1.31", "latest"])
def test_version_must_be_a_release(release: Release, tmp_path: Path, version: str) -> None:
    """It names a directory in the cache: nothing else may get there."""
    with pytest.raises(DownloadError, match="not a Kubernetes release"):
        download(
            version,
            dest=tmp_path / "v",
            kube_base_url=release.kube_url,
            etcd_base_url=release.etcd_url,
            arch="amd64",
        )
    assert release.requests == []


def test_unknown_minor_gets_the_newest_etcd(release: Release, tmp_path: Path) -> None:
    newest = binaries.ETCD_FOR_KUBE[max(binaries.ETCD_FOR_KUBE, key=lambda m: int(m[2:]))]
    release.add_kube(version="1.99.0")
    release.add_etcd(newest)
    dest = download(
        "1.99.0",
        dest=tmp_path / "1.99.0",
        kube_base_url=release.kube_url,
        etcd_base_url=release.etcd_url,
        arch="amd64",
    )
    assert (dest / "etcd").read_bytes() == release.content["etcd"]
    assert f"/etcd/v{newest}/SHA256SUMS" in release.requests


def test_bad_checksum_fails_and_leaves_nothing(release: Release, tmp_path: Path) -> None:
    path = f"/kube/v{VERSION}/bin/linux/amd64/kube-scheduler"
    release.files[path + ".sha256"] = f"{'ab' * 32}  kube-scheduler\n".encode()
    (tmp_path / "unrelated").write_text("mine")
    before = listing(tmp_path)

    with pytest.raises(DownloadError, match=r"kube-scheduler: sha256 .* not the published ab") as e:
        fetch(release, tmp_path / VERSION)

    assert "\n" not in str(e.value)
    assert listing(tmp_path) == before


def test_etcd_tarball_checksum_is_checked(release: Release, tmp_path: Path) -> None:
    path = f"/etcd/v{ETCD}/etcd-v{ETCD}-linux-amd64.tar.gz"
    release.files[path] = b"not the tarball SHA256SUMS names"
    with pytest.raises(DownloadError, match=r"tar\.gz: sha256"):
        fetch(release, tmp_path / VERSION)
    assert os.listdir(tmp_path) == []


def test_dropped_connection_fails_and_leaves_nothing(release: Release, tmp_path: Path) -> None:
    path = f"/kube/v{VERSION}/bin/linux/amd64/kube-controller-manager"
    release.dropped.add(path)
    with pytest.raises(DownloadError, match="connection dropped after 1000 of 100000") as e:
        fetch(release, tmp_path / VERSION)
    assert release.url + path in str(e.value)
    assert os.listdir(tmp_path) == []


def test_http_error_names_the_url(release: Release, tmp_path: Path) -> None:
    del release.files[f"/kube/v{VERSION}/bin/linux/amd64/kubectl.sha256"]
    with pytest.raises(DownloadError, match=r"kubectl\.sha256: HTTP 404"):
        fetch(release, tmp_path / VERSION)
    assert os.listdir(tmp_path) == []


def test_interrupt_cleans_up_and_is_reraised(release: Release, tmp_path: Path) -> None:
    def interrupt(name: str, done: int, total: int | None) -> None:
        if name == "kube-scheduler" and done > 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch(release, tmp_path / VERSION, progress=interrupt)
    assert os.listdir(tmp_path) == []


def test_failed_redownload_keeps_the_good_cache(release: Release, tmp_path: Path) -> None:
    dest = fetch(release, tmp_path / VERSION)
    before = listing(tmp_path)
    release.dropped.add(f"/etcd/v{ETCD}/etcd-v{ETCD}-linux-amd64.tar.gz")

    with pytest.raises(DownloadError, match="connection dropped"):
        fetch(release, dest)

    assert listing(tmp_path) == before


def test_redownload_replaces_the_cache_whole(release: Release, tmp_path: Path) -> None:
    dest = tmp_path / VERSION
    dest.mkdir()
    (dest / "kube-apiserver").write_bytes(b"old")
    (dest / "stray").write_bytes(b"old")

    fetch(release, dest)

    assert sorted(os.listdir(tmp_path)) == [VERSION]  # the old directory is gone too
    assert sorted(os.listdir(dest)) == sorted(ALL)
    assert (dest / "kube-apiserver").read_bytes() == release.content["kube-apiserver"]


def test_failed_swap_puts_the_old_cache_back(
    release: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = fetch(release, tmp_path / VERSION)
    before = listing(tmp_path)
    rename = Path.rename

    def failing_rename(self: Path, target: Path) -> Path:
        if ".partial-" in self.name and Path(target) == dest:
            raise OSError(18, "Invalid cross-device link")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(DownloadError, match="cross-device"):
        fetch(release, dest)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("member", ["../evil", "/tmp/evil", "etcd-v3.5.17-linux-amd64/../../evil"])
def test_tarball_escaping_its_directory_is_refused(
    release: Release, tmp_path: Path, member: str
) -> None:
    release.add_etcd(extra=tarfile.TarInfo(member))
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(DownloadError, match="refusing tar member"):
        fetch(release, cache / VERSION)
    assert os.listdir(cache) == []
    assert not (tmp_path / "evil").exists()


def test_etcd_must_be_a_regular_file_in_the_tarball(release: Release, tmp_path: Path) -> None:
    link = tarfile.TarInfo(f"etcd-v{ETCD}-linux-amd64/etcd")
    link.type, link.linkname = tarfile.SYMTYPE, "/bin/sh"
    release.add_etcd(extra=link, with_etcd=False)
    with pytest.raises(DownloadError, match=f"no etcd-v{ETCD}-linux-amd64/etcd in the tarball"):
        fetch(release, tmp_path / VERSION)
    assert os.listdir(tmp_path) == []


def test_body_without_content_length(release: Release, tmp_path: Path) -> None:
    """Without a size only the checksum can tell a whole file; progress still sees it end."""
    release.unsized.add(f"/kube/v{VERSION}/bin/linux/amd64/kubectl")
    calls: list[tuple[str, int, int | None]] = []
    dest = fetch(release, tmp_path / VERSION, progress=lambda *a: calls.append(a))
    assert (dest / "kubectl").read_bytes() == release.content["kubectl"]
    assert [c for c in calls if c[0] == "kubectl"][-1] == ("kubectl", 4096, 4096)
    assert ("kubectl", 4096, None) in calls


def test_stale_partial_directories_are_removed(release: Release, tmp_path: Path) -> None:
    """A download killed outright (SIGKILL, power) leaves its partial directory: cleaned after
    an hour, while one touched recently may belong to a download still running."""
    stale, live = tmp_path / ".1.30.0.partial-abc", tmp_path / f".{VERSION}.partial-def"
    for d in (stale, live):
        d.mkdir()
        (d / "kube-apiserver.part").write_bytes(b"x")
    two_hours_ago = time.time() - 7200
    for p in (stale / "kube-apiserver.part", stale, live):  # live: its file is still growing
        os.utime(p, (two_hours_ago, two_hours_ago))

    fetch(release, tmp_path / VERSION)

    assert sorted(os.listdir(tmp_path)) == sorted([VERSION, live.name])


def make_bin(directory: Path, *names: str, executable: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755 if executable else 0o644)
    return directory


def test_find_binaries_order(tmp_path: Path) -> None:
    """--kube-bin, then KUBEBUILDER_ASSETS, then KUBELET_SIM_KUBE_BIN, then the cache, then PATH."""
    places = [
        "opt",
        "assets",
        "tests",
        f"cache/kubelet-sim/kube-bin/{DEFAULT_KUBE_VERSION}",
        "path",
    ]
    dirs = [make_bin(tmp_path / p, *ALL) for p in places]
    env = {
        "KUBEBUILDER_ASSETS": str(dirs[1]),
        "KUBELET_SIM_KUBE_BIN": str(dirs[2]),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PATH": f"{tmp_path / 'empty'}:{dirs[4]}",
    }
    for d in dirs:
        assert find_binaries(dirs[0], env=env).apiserver == d / "kube-apiserver"
        assert find_binaries(dirs[0], env=env).kubectl == d / "kubectl"
        (d / "kube-apiserver").unlink()
        (d / "kubectl").unlink()
    with pytest.raises(BinariesMissing, match="kube-apiserver not found"):
        find_binaries(dirs[0], env=env)


def test_each_binary_from_the_first_place_that_has_it(tmp_path: Path) -> None:
    """Debian's etcd-server puts etcd on PATH; envtest's directory may lack the controllers."""
    assets = make_bin(tmp_path / "assets", "kube-apiserver", "kube-scheduler")
    make_bin(tmp_path / "assets", "etcd", executable=False)  # not executable: skipped
    cache = make_bin(tmp_path / "xdg/kubelet-sim/kube-bin/1.30.0", "kube-controller-manager")
    path = make_bin(tmp_path / "bin", "etcd", "kubectl", "kube-scheduler")
    env = {"KUBEBUILDER_ASSETS": str(assets), "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    found = find_binaries(version="1.30.0", env=env | {"PATH": str(path)})

    assert found == Binaries(
        assets / "kube-apiserver",
        path / "etcd",
        cache / "kube-controller-manager",
        assets / "kube-scheduler",
        path / "kubectl",
    )


def test_the_cache_gives_the_version_asked_not_the_newest(tmp_path: Path) -> None:
    """A run asked to be on v1.24 must not silently get the v1.34 beside it, nor the reverse."""
    cache = tmp_path / "xdg" / "kubelet-sim" / "kube-bin"
    for version in ("1.24.0", DEFAULT_KUBE_VERSION, "1.99.0", ".1.24.0.partial-x", "junk"):
        make_bin(cache / version, *ALL, "kubelet")
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PATH": ""}

    assert find_binaries(env=env).apiserver == cache / DEFAULT_KUBE_VERSION / "kube-apiserver"
    assert find_binaries(version="1.24.0", env=env).kubelet == cache / "1.24.0/kubelet"
    assert find_binaries(version="1.24.0", env=env).apiserver == cache / "1.24.0/kube-apiserver"
    assert find_binaries(version="v1.24.0", env=env).apiserver == cache / "1.24.0/kube-apiserver"


def test_a_version_not_there_is_named_with_those_that_are(tmp_path: Path) -> None:
    cache = tmp_path / "xdg" / "kubelet-sim" / "kube-bin"
    for version in ("1.24.0", "1.34.9"):
        make_bin(cache / version, *ALL)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PATH": ""}

    with pytest.raises(BinariesMissing) as e:
        find_binaries(version="1.33.1", env=env)

    message = str(e.value)
    assert message.startswith("kube-apiserver, etcd, kube-controller-manager, kube-scheduler not")
    assert f"{cache / '1.33.1'} (Kubernetes 1.33.1; the cache has: 1.34.9, 1.24.0)" in message
    assert "`kubelet-sim demo --download --kube-version 1.33.1`" in message


def test_missing_binaries_message_says_where_and_the_three_ways_out(tmp_path: Path) -> None:
    opt = make_bin(tmp_path / "opt", "kube-apiserver", "kube-scheduler")
    env = {"HOME": str(tmp_path / "home"), "PATH": str(make_bin(tmp_path / "bin", "etcd"))}

    with pytest.raises(BinariesMissing) as e:
        find_binaries(opt, env=env)

    message = str(e.value)
    assert message.startswith("kube-controller-manager not found")
    assert str(opt) in message
    assert "PATH" in message
    cache = tmp_path / "home" / ".cache" / "kubelet-sim" / "kube-bin"
    assert f"--kube-version {DEFAULT_KUBE_VERSION}` fetches them into {cache}" in message
    assert "`--kube-bin DIR` or KUBEBUILDER_ASSETS=DIR" in message
    assert "setup-envtest use -p path" in message
    assert "(kind), run `kubelet-sim --node-name n1`" in message


def test_controllers_optional_when_not_required(tmp_path: Path) -> None:
    assets = make_bin(tmp_path / "assets", "kube-apiserver", "etcd")
    env = {"KUBELET_SIM_KUBE_BIN": str(assets), "HOME": str(tmp_path), "PATH": ""}

    found = find_binaries(require_controllers=False, env=env)

    assert found == Binaries(assets / "kube-apiserver", assets / "etcd", None, None, None)
    with pytest.raises(BinariesMissing, match="kube-controller-manager, kube-scheduler not found"):
        find_binaries(env=env)
    (assets / "etcd").unlink()
    with pytest.raises(BinariesMissing, match=r"^etcd not found"):
        find_binaries(require_controllers=False, env=env)


def test_cache_dir_follows_xdg() -> None:
    assert cache_dir({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/kubelet-sim/kube-bin")
    assert cache_dir({"HOME": "/h"}) == Path("/h/.cache/kubelet-sim/kube-bin")
    assert cache_dir({"XDG_CACHE_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.cache/kubelet-sim/kube-bin"
    )


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def feed(bar: binaries.Progress) -> None:
    for done in range(0, 27_000_001, 1_000_000):
        bar("kube-apiserver", done, 27_000_000)
    for done in (0, 1_000_000, 2_000_000):
        bar("etcd", done, None)
    bar("etcd", 2_000_000, 2_000_000)
    bar("etcd", 2_000_000, 2_000_000)  # once finished, a file is not drawn again


def test_progress_bar_redraws_in_place_on_a_terminal() -> None:
    out = Tty()
    feed(progress_bar(out))
    text = out.getvalue()
    lines = text.split("\n")
    assert len(lines) == 3  # two finished bars and nothing after
    assert lines[0].count("\r") == 28
    assert "kube-apiserver           [#####.........................]  18% 5.0/27.0 MB" in text
    assert lines[0].endswith("[##############################] 100% 27.0/27.0 MB")
    assert lines[1].rsplit("\r", 1)[1].startswith("etcd")


def test_progress_bar_prints_one_line_per_file_elsewhere() -> None:
    out = io.StringIO()
    feed(progress_bar(out))
    assert "\r" not in out.getvalue()
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == ["kube-apiserver", "etcd"]
    assert lines[0].endswith("100% 27.0/27.0 MB")
