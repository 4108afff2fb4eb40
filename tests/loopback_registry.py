"""A registry on loopback serving one tiny image, so that a successful pull is tested where no
real registry answers (Docker treats 127.0.0.0/8 registries as insecure: plain HTTP).

Only what `docker pull` asks for: `GET /v2/`, a schema 2 manifest (HEAD and GET) and two blobs
(the image config and one gzipped layer holding a file)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer() -> tuple[bytes, bytes]:
    """(the layer's tar, gzipped) with /hello.txt."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        body = b"hello from the loopback registry\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return raw.getvalue(), gzip.compress(raw.getvalue(), mtime=0)


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT
    manifest_digest: str


@contextmanager
def loopback_registry(repository: str, tag: str) -> Iterator[Registry]:
    tar, layer = _layer()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/hello.txt"]},
            "rootfs": {"type": "layers", "diff_ids": [_digest(tar)]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": _digest(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": _digest(layer),
                }
            ],
        }
    ).encode()
    served = {
        "/v2/": (b"{}", "application/json"),
        f"/v2/{repository}/manifests/{tag}": (manifest, MANIFEST_TYPE),
        f"/v2/{repository}/manifests/{_digest(manifest)}": (manifest, MANIFEST_TYPE),
        f"/v2/{repository}/blobs/{_digest(config)}": (config, "application/octet-stream"),
        f"/v2/{repository}/blobs/{_digest(layer)}": (layer, "application/octet-stream"),
    }

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, with_body: bool) -> None:
            found = served.get(self.path)
            if found is None:
                self.send_error(404)
                return
            body, content_type = found
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Docker-Content-Digest", _digest(body))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(with_body=True)

        def do_HEAD(self) -> None:
            self._answer(with_body=False)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Registry(f"127.0.0.1:{server.server_address[1]}", _digest(manifest))
    finally:
        server.shutdown()
        server.server_close()
