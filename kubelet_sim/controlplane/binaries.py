"""The control plane's binaries for `kubelet-sim demo`: found on this machine, or downloaded.

Standard library only, so that a plain `pip install` can run the demo. A download is checked
against the checksums the projects publish and lands in the cache whole or not at all: a
half-written binary found later would fail far from its cause.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import platform
import re
import secrets
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TextIO

KUBE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# The version the demo, the pytest plugin and the tests' real pass run unless told otherwise,
# and the one `--download` fetches: one constant, so the three never disagree.
DEFAULT_KUBE_VERSION = "1.34.9"
# The etcd each Kubernetes minor ships with. A minor not listed gets the newest listed etcd:
# etcd 3.5 and 3.6 serve every current Kubernetes, and a demo should not stop at a missing entry.
ETCD_FOR_KUBE = {
    "1.29": "3.5.10",
    "1.30": "3.5.15",
    "1.31": "3.5.17",
    "1.32": "3.5.17",
    "1.33": "3.5.21",
    "1.34": "3.6.4",
}
KUBE_DOWNLOAD_URL = "https://dl.k8s.io/release"
ETCD_DOWNLOAD_URL = "https://github.com/etcd-io/etcd/releases/download"
KUBE_URL_ENV, ETCD_URL_ENV = "KUBELET_SIM_KUBE_DOWNLOAD_URL", "KUBELET_SIM_ETCD_DOWNLOAD_URL"
TIMEOUT = 30.0  # seconds per connect and per read: a stalled server fails, a slow one does not
_CHUNK = 1 << 20
_STALE_AFTER = 3600.0  # a partial directory untouched this long belongs to no live download
_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")

Progress = Callable[[str, int, int | None], None]


class BinariesMissing(Exception):
    """A required binary is nowhere to be found; the message says where we looked and what to do."""


class DownloadError(Exception):
    """A download failed (HTTP, connection, checksum, tarball); one line naming the URL."""


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    etcd: Path
    controller_manager: Path | None
    scheduler: Path | None
    kubectl: Path | None = None
    kubelet: Path | None = None  # the upstream kubelet of the same version: the reference node


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where downloads go, one directory per version (XDG's cache, as users expect)."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CACHE_HOME", "")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base = Path(xdg) if os.path.isabs(xdg) else home / ".cache"  # XDG: relative ones are invalid
    return base / "kubelet-sim" / "kube-bin"


def _version_key(name: str) -> tuple[int, int, int] | None:
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", name)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _cached_versions(cache: Path) -> list[Path]:
    try:
        entries = list(cache.iterdir())
    except OSError:
        return []
    versions = [(key, d) for d in entries if (key := _version_key(d.name)) and d.is_dir()]
    return [d for _, d in sorted(versions, reverse=True)]


def find_binaries(
    kube_bin: Path | None = None,
    *,
    version: str | None = None,
    require_controllers: bool = True,
    env: Mapping[str, str] | None = None,
) -> Binaries:
    """Look in order: kube_bin (the --kube-bin option), $KUBEBUILDER_ASSETS,
    $KUBELET_SIM_KUBE_BIN (the tests' variable), the cache's directory of `version` (default
    DEFAULT_KUBE_VERSION), then PATH. Each component comes from the first place that has it,
    since etcd often comes from PATH alone (Debian's etcd-server). A directory named outright
    holds one version and is taken as it is; the version picks among the cache's, so that a
    run on v1.24 never silently gets v1.34. require_controllers=False lets controller-manager
    and scheduler be None (the tests' control plane runs without them)."""
    env = os.environ if env is None else env
    version = (version or DEFAULT_KUBE_VERSION).removeprefix("v")
    named = [("--kube-bin", "" if kube_bin is None else str(kube_bin))]
    named += [(v, env.get(v, "")) for v in ("KUBEBUILDER_ASSETS", "KUBELET_SIM_KUBE_BIN")]
    cache = cache_dir(env)
    cached = [d for d in _cached_versions(cache) if d.name == version]
    dirs = [Path(d) for _, d in named if d] + cached
    search_path = env.get("PATH", os.defpath)

    def find(name: str) -> Path | None:
        for d in dirs:
            if (d / name).is_file() and os.access(d / name, os.X_OK):
                return d / name
        found = shutil.which(name, path=search_path)
        return Path(found) if found else None

    found = {name: find(name) for name in (*KUBE_COMPONENTS, "etcd", "kubelet")}
    apiserver, etcd = found["kube-apiserver"], found["etcd"]
    controllers = KUBE_COMPONENTS[1:3] if require_controllers else ()
    missing = [n for n in ("kube-apiserver", "etcd", *controllers) if found[n] is None]
    if missing or apiserver is None or etcd is None:
        present = ", ".join(d.name for d in _cached_versions(cache)) or "no versions"
        where = f"{cache / version} (Kubernetes {version}; the cache has: {present})"
        looked = [f"{what}={d}" for what, d in named if d] + [where, "PATH"]
        raise BinariesMissing(
            f"{', '.join(missing)} not found; looked in: {', '.join(looked)}.\nWays out:\n"
            f"  (1) `kubelet-sim demo --download --kube-version {version}` fetches them into"
            f" {cache / version}, or `--kube-version` names a version the cache has\n"
            "  (2) `--kube-bin DIR` or KUBEBUILDER_ASSETS=DIR naming a directory that has them"
            " (e.g. from `setup-envtest use -p path`)\n"
            "  (3) with a cluster of your own (kind), run `kubelet-sim --node-name n1` against it"
            " instead"
        )
    kcm, scheduler = found["kube-controller-manager"], found["kube-scheduler"]
    return Binaries(apiserver, etcd, kcm, scheduler, found["kubectl"], found["kubelet"])


def download(
    version: str = DEFAULT_KUBE_VERSION,
    *,
    dest: Path | None = None,
    etcd_version: str | None = None,
    kube_base_url: str | None = None,
    etcd_base_url: str | None = None,
    arch: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Fetch kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd into
    dest (default cache_dir()/<version>) and return it. All five go to a hidden sibling
    directory first, renamed into place once verified: dest holds the old set or the new one.
    Base URLs: the arguments, else $KUBELET_SIM_KUBE_DOWNLOAD_URL / $KUBELET_SIM_ETCD_DOWNLOAD_URL
    (mirrors, tests), else the projects' own. etcd: ETCD_FOR_KUBE's for the minor."""
    version = version.removeprefix("v")
    if _version_key(version) is None:
        raise DownloadError(f"not a Kubernetes release: {version!r} (e.g. {DEFAULT_KUBE_VERSION})")
    arch = arch or _arch()
    etcd = (etcd_version or _etcd_for(version)).removeprefix("v")
    kube_url = (kube_base_url or os.environ.get(KUBE_URL_ENV) or KUBE_DOWNLOAD_URL).rstrip("/")
    etcd_url = (etcd_base_url or os.environ.get(ETCD_URL_ENV) or ETCD_DOWNLOAD_URL).rstrip("/")
    dest = cache_dir() / version if dest is None else Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(dest.parent)
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    except OSError as e:
        raise DownloadError(f"cannot write the download next to {dest}: {e}") from e
    try:
        for name in KUBE_COMPONENTS:
            url = f"{kube_url}/v{version}/bin/linux/{arch}/{name}"
            _fetch(url, work / name, _published_sha256(url + ".sha256"), name, progress)
        _fetch_etcd(f"{etcd_url}/v{etcd}", f"etcd-v{etcd}-linux-{arch}", work, progress)
        for path in (work, *work.iterdir()):
            path.chmod(0o755)
        _install(work, dest)
    except BaseException as e:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(e, DownloadError) or not isinstance(e, Exception):
            raise  # KeyboardInterrupt included: cleaned up, then on its way
        raise DownloadError(f"downloading Kubernetes {version} into {dest}: {e}") from e
    return dest


def _arch() -> str:
    machine = platform.machine().lower()
    if machine not in _ARCHES:
        raise DownloadError(f"no Kubernetes binaries for this machine ({machine}): amd64, arm64")
    return _ARCHES[machine]


def _etcd_for(version: str) -> str:
    minor = ".".join(version.split(".")[:2])
    newest = max(ETCD_FOR_KUBE, key=lambda m: tuple(int(p) for p in m.split(".")))
    return ETCD_FOR_KUBE.get(minor, ETCD_FOR_KUBE[newest])


def _remove_stale(parent: Path) -> None:
    """Leftovers of a download that was killed: a live one touches its files as it writes."""
    now = time.time()
    for leftover in (*parent.glob(".*.partial-*"), *parent.glob(".*.old-*")):
        try:
            touched = max(p.lstat().st_mtime for p in (leftover, *leftover.iterdir()))
        except OSError:
            continue
        if now - touched > _STALE_AFTER:
            shutil.rmtree(leftover, ignore_errors=True)


def _install(work: Path, dest: Path) -> None:
    """Swap the finished directory in; a failed rename puts the old one back."""
    old = None
    if dest.exists() or dest.is_symlink():
        old = dest.with_name(f".{dest.name}.old-{secrets.token_hex(4)}")
        dest.rename(old)
    try:
        work.rename(dest)
    except OSError:
        if old is not None:
            old.rename(dest)
        raise
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()


def _why(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return str(e) or type(e).__name__


def _fetch_small(url: str, limit: int = 1 << 20) -> str:
    """A checksum file: small, so read whole (but bounded)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
            data: bytes = resp.read(limit + 1)
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise DownloadError(f"{url}: {_why(e)}") from e
    if len(data) > limit:
        raise DownloadError(f"{url}: larger than {limit} bytes, not a checksum file")
    return data.decode("utf-8", "replace")


def _published_sha256(url: str) -> str:
    """dl.k8s.io's `<name>.sha256`: the hex digest, maybe followed by a file name."""
    words = _fetch_small(url).split()
    if not words or not _SHA256.fullmatch(words[0]):
        raise DownloadError(f"{url}: no sha256 digest in it")
    return words[0].lower()


def _fetch(url: str, target: Path, sha256: str, name: str, progress: Progress | None) -> None:
    """Stream url to target, hashing on the way; target appears only once the hash matches."""
    part = target.with_name(target.name + ".part")
    digest, done, total = hashlib.sha256(), 0, None
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as resp, part.open("wb") as out:
            length = resp.headers.get("Content-Length", "")
            total = int(length) if length.isdigit() else None
            if progress:
                progress(name, 0, total)
            while chunk := resp.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress(name, done, total)
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise DownloadError(f"{url}: {_why(e)} (after {done} bytes)") from e
    if total is not None and done != total:  # http.client reports a short body as a clean end
        raise DownloadError(f"{url}: connection dropped after {done} of {total} bytes")
    if digest.hexdigest() != sha256:
        raise DownloadError(f"{url}: sha256 {digest.hexdigest()} is not the published {sha256}")
    part.rename(target)
    if progress and total is None:
        progress(name, done, done)  # the bar's "finished" when the size was unknown


def _fetch_etcd(base: str, stem: str, work: Path, progress: Progress | None) -> None:
    """etcd's release tarball, checked against SHA256SUMS; only its `etcd` is kept."""
    tar_name = f"{stem}.tar.gz"
    sums_url, url = f"{base}/SHA256SUMS", f"{base}/{tar_name}"
    sha256 = None
    for line in _fetch_small(sums_url).splitlines():
        words = line.split()
        if len(words) >= 2 and words[1].lstrip("*") == tar_name and _SHA256.fullmatch(words[0]):
            sha256 = words[0].lower()
    if sha256 is None:
        raise DownloadError(f"{sums_url}: no checksum for {tar_name}")
    tarball = work / tar_name
    _fetch(url, tarball, sha256, "etcd", progress)
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            wanted = None
            for member in tar:
                parts = PurePosixPath(member.name).parts
                if member.name.startswith("/") or ".." in parts:
                    raise DownloadError(f"{url}: refusing tar member {member.name!r}")
                if "/".join(p for p in parts if p != ".") == f"{stem}/etcd" and member.isfile():
                    wanted = member
            source = tar.extractfile(wanted) if wanted else None
            if source is None:
                raise DownloadError(f"{url}: no {stem}/etcd in the tarball")
            with source, (work / "etcd").open("wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise DownloadError(f"{url}: unreadable tarball: {e}") from e
    finally:
        tarball.unlink(missing_ok=True)


def progress_bar(stream: TextIO | None = None) -> Progress:
    """A progress callback for download(): one bar per file redrawn in place on a terminal;
    elsewhere (CI logs, pipes) one line per finished file instead of a flood of redraws.
    stream defaults to sys.stderr as it is when called (pytest swaps it)."""
    out = sys.stderr if stream is None else stream
    tty = out.isatty()
    width = max(len(n) for n in (*KUBE_COMPONENTS, "etcd"))
    drawn: dict[str, str] = {}
    finished: set[str] = set()

    def update(name: str, done: int, total: int | None) -> None:
        if name in finished:
            return
        end = total is not None and done >= total
        if total:
            filled = min(30, done * 30 // total)
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {done * 100 // total:3d}%"
            line = f"{name:<{width}}  {bar} {done / 1e6:.1f}/{total / 1e6:.1f} MB"
        else:
            line = f"{name:<{width}}  {done / 1e6:.1f} MB"
        if end:
            finished.add(name)
            out.write(f"\r{line}\n" if tty else f"{line}\n")
        elif tty and drawn.get(name) != line:
            out.write(f"\r{line}")
        else:
            return
        drawn[name] = line
        out.flush()

    return update
