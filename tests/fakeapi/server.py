"""HTTP front end: routing, watch streaming, fault hooks; `FakeApiServer` is the public API."""

from __future__ import annotations

import contextlib
import copy
import json
import queue
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakeapi import (
    authz,
    errors,
    nodeproxy,
    openapi,
    resources,
    reviews,
    routes,
    selectors,
    services,
)
from tests.fakeapi.errors import ApiError
from tests.fakeapi.faults import FailRule, Faults, Predicate, RequestLog, RequestRecord
from tests.fakeapi.registry import Registry, _parse_rv, typed
from tests.fakeapi.resources import BINDINGS, NAMESPACES, NODES, PODS, Resource, lookup
from tests.fakeapi.store import Event, Store, Watcher, with_rv

Obj = dict[str, Any]
NOT_ALLOWED = "the server does not allow this method on the requested resource"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class _Abort(Exception):
    """End a watch stream by cutting the connection (no terminating chunk)."""


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: FakeApiServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a cut watch, a timed-out read) is normal, not a traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small header + body writes must not wait for delayed ACKs
    server: _HttpServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr line."""

    def do_GET(self) -> None:
        self.server.owner._handle(self)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET


@dataclass(eq=False)
class _Stream:
    watcher: Watcher
    connection: socket.socket


@dataclass(frozen=True)
class _Feed:
    """One watch's answer: its connection, what it watches, and the store's watcher for it."""

    h: _Handler
    res: Resource
    namespace: str | None
    match: selectors.Matcher
    watcher: Watcher


class FakeApiServer:
    """An in-memory kube-apiserver for core/v1 pods, namespaces, nodes, configmaps, secrets,
    events and coordination.k8s.io/v1 leases, reachable by the official client over HTTP."""

    def __init__(
        self,
        *,
        bookmark_interval: float = 60.0,
        history_size: int = 1000,
        port: int = 0,
        schema: str = "v1.34",
    ) -> None:
        self.bookmark_interval = bookmark_interval
        self.store = Store(history_size)
        # "v1.34": the types (and /version) of the default real server; "v1.24": those of the
        # oldest supported one (the contract test's fake against it).
        self.types = openapi.by_name(schema)
        self.registry = Registry(self.store, self.types)
        self.faults = Faults()
        self.log = RequestLog()
        self.requests = self.log.find  # the logged requests matching filters, as the log finds them
        self._port = port
        self._tokens: dict[str, str] = {}
        self._conn_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._streams: set[_Stream] = set()
        self._stopping = threading.Event()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        # (cert, key) for pods/exec, attach, portforward and log (--kubelet-client-certificate)
        self.kubelet_client: tuple[str, str] | None = None
        self.access_reviews: list[dict[str, Any]] = []  # each SubjectAccessReview's spec, a spy
        for name in DEFAULT_NAMESPACES:
            self.registry.create(NAMESPACES, "", {"metadata": {"name": name}})
        master = copy.deepcopy(services.MASTER_SERVICE)
        master["spec"]["clusterIP"] = str(services.SERVICE_RANGE[1])
        self.registry.create(resources.SERVICES, "default", master)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        """Listen on 127.0.0.1 and serve from a daemon thread."""
        self._httpd = _HttpServer(("127.0.0.1", self._port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop quickly: end every watch and cut every open connection."""
        self._stopping.set()
        self.faults.unfreeze()
        self.drop_watches()
        with self._conn_lock:
            connections = list(self._connections)
        for conn in connections:
            _cut(conn)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port."""
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:41234."""
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(
        self, path: str | Path, user: str = "admin", token: str | None = None
    ) -> Path:
        """Write a kubeconfig pointing at this server; the token identifies `user` in the log."""
        token = token or f"fake-token-{user}"
        self._tokens[token] = user
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": f"{user}@fake", "context": {"cluster": "fake", "user": user}}],
            "current-context": f"{user}@fake",
            "preferences": {},
        }
        target = Path(path)
        target.write_text(json.dumps(config, indent=2))
        return target

    # --- fault hooks ------------------------------------------------------------------------

    def drop_watches(self) -> None:
        """Cut every open watch connection now."""
        with self._conn_lock:
            streams = list(self._streams)
        for stream in streams:
            stream.watcher.stop()
            _cut(stream.connection)

    def compact(self) -> None:
        """Forget the event history: resuming from an older RV now yields a 410 ERROR event."""
        self.store.compact()

    def fail_next(
        self,
        n: int = 1,
        status: int = 500,
        *,
        verb: str | None = None,
        resource: str | None = None,
        predicate: Predicate | None = None,
    ) -> None:
        """Answer the next n matching requests with `status` and a Status body."""
        with self.faults.lock:
            self.faults.rules.append(FailRule(n, status, verb, resource, predicate))

    def set_latency(self, seconds: float) -> None:
        """Delay every request by `seconds` before handling it."""
        with self.faults.lock:
            self.faults.latency = seconds

    def freeze(self) -> None:
        """Half-open link: accept, answer nothing, silence open watches."""
        self.faults.freeze()

    def unfreeze(self) -> None:
        """Drop the held requests and the silenced watches; serve new requests normally."""
        self.faults.unfreeze()

    def reset_faults(self) -> None:
        """No latency, no pending failures, not frozen."""
        self.faults.reset()

    # --- request log and direct access ------------------------------------------------------

    def count(self, verb: str, resource: str, subresource: str | None = None) -> int:
        """How many requests of that verb hit the resource (any subresource when None)."""
        return len(self.log.find(verb, resource, subresource))

    def reset_log(self) -> None:
        """Forget the logged requests."""
        self.log.reset()

    def get_object(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        """A deep copy of a stored object (without kind/apiVersion), or None."""
        return self.store.get(resource, namespace or "", name)

    def current_rv(self) -> int:
        """The latest resourceVersion."""
        return self.store.current_rv()

    @staticmethod
    def registry_resource(name: str, group: str = "") -> Resource:
        """The `Resource` for a plural name, for direct `registry` calls from tests."""
        res = lookup(group, name)
        if res is None:
            raise KeyError(name)
        return res

    # --- request handling -------------------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._conn_lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _user(self, authorization: str | None) -> str | None:
        if not authorization:
            return "system:anonymous"
        token = authorization.removeprefix("Bearer ").strip()
        return self._tokens.get(token)

    def _handle(self, h: _Handler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        url = urlsplit(h.path)
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        route = routes.parse(h.command, url.path, params, self.types)
        record = RequestRecord(
            time=time.time(),
            method=h.command,
            verb=route.verb,
            resource=route.log_resource,
            subresource=route.sub,
            namespace=route.namespace,
            name=route.name,
            path=h.path,
            user_agent=h.headers.get("User-Agent", ""),
            user=self._user(h.headers.get("Authorization")),
        )
        self.log.add(record)
        if self.faults.frozen:
            self._hold(h)
            return
        if self.faults.latency:
            time.sleep(self.faults.latency)
        try:
            injected = self.faults.take(record)
            if injected is not None:
                raise injected
            self._dispatch(h, record, route, params, raw)
        except ApiError as exc:
            self._send(h, record, exc.code, exc.status(), exc.headers)
        except (BrokenPipeError, ConnectionResetError, _Abort):
            h.close_connection = True
        except Exception as exc:  # a bug in the fake: answer like the real server's 500
            traceback.print_exc()
            err = ApiError(500, f"Internal error occurred: {exc!r}")
            self._send(h, record, 500, err.status(), {})

    def _hold(self, h: _Handler) -> None:
        """A request during a freeze: wait for the thaw, then close without an answer."""
        while not self.faults.unfrozen.wait(0.05):
            if self._stopping.is_set():
                break
        h.close_connection = True
        _cut(h.connection)

    def _send(
        self, h: _Handler, record: RequestRecord, code: int, body: Obj, headers: dict[str, str]
    ) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        record.code = code
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(data)

    def _dispatch(
        self,
        h: _Handler,
        record: RequestRecord,
        route: routes.Route,
        params: dict[str, str],
        raw: bytes,
    ) -> None:
        if route.document is not None:
            self._send(h, record, 200, route.document, {})
            return
        res = route.resource
        if res is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        authz.check(record.user, route, params, _json_or_none(raw), self.store)
        if res in resources.REVIEWS:
            if route.verb != "create" or route.name is not None:
                raise ApiError(405, NOT_ALLOWED, "MethodNotAllowed")
            body = _json(raw)
            if res is not resources.TOKENREVIEWS:
                self.access_reviews.append(dict(body.get("spec") or {}))
            answer = (
                reviews.token_review(self._tokens, body)
                if res is resources.TOKENREVIEWS
                else reviews.access_review(body)
            )
            self._send(h, record, 201, answer, {})
            return
        if res is BINDINGS:
            if route.verb != "create" or route.name is not None:
                raise ApiError(405, NOT_ALLOWED, "MethodNotAllowed")
            self._send(
                h, record, 201, self.registry.bind(route.namespace or "", None, _json(raw)), {}
            )
            return
        if res is PODS and route.sub in nodeproxy.SUBRESOURCES:
            self._node_proxy(h, record, route, raw)
            return
        self._dispatch_verb(h, record, route, res, params, raw)

    def _dispatch_verb(
        self,
        h: _Handler,
        record: RequestRecord,
        route: routes.Route,
        res: Resource,
        params: dict[str, str],
        raw: bytes,
    ) -> None:
        """A resource's own verbs: watch, list, get, create, update, patch, delete."""
        ns = route.namespace if res.namespaced else ""
        verb, name = route.verb, route.name or ""
        if verb == "watch":
            self._watch(h, record, res, route.namespace, params)
        elif verb == "list":
            match = selectors.combined(
                res.name, params.get("labelSelector"), params.get("fieldSelector")
            )
            body = self.registry.list(
                res,
                route.namespace,
                match,
                params.get("resourceVersion"),
                params.get("resourceVersionMatch"),
            )
            self._send(h, record, 200, body, {})
        elif verb == "get":
            self._send(h, record, 200, typed(res, self.registry.get(res, ns or "", name)), {})
        elif verb == "create" and route.sub == "token":
            self._send(h, record, 201, self.registry.token_request(ns or "", name, _json(raw)), {})
        elif verb == "create" and route.sub == "binding":
            self._send(h, record, 201, self.registry.bind(ns or "", name, _json(raw)), {})
        elif verb == "create":
            self._check_create_scope(res, route)
            self._send(
                h, record, 201, typed(res, self.registry.create(res, ns or "", _json(raw))), {}
            )
        elif verb == "update":
            obj, code = self.registry.update(res, ns or "", name, _json(raw), route.sub)
            self._send(h, record, code, typed(res, obj), {})
        elif verb == "patch":
            content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip()
            obj = self.registry.patch(res, ns or "", name, content_type, raw, route.sub)
            self._send(h, record, 200, typed(res, obj), {})
        elif verb == "delete":
            options = _delete_options(params, raw)
            self._send(h, record, 200, self.registry.delete(res, ns or "", name, options), {})
        elif verb == "deletecollection":
            self._send(h, record, 200, self._delete_collection(res, route.namespace, params), {})
        else:
            raise ApiError(
                405,
                NOT_ALLOWED,
                "MethodNotAllowed",
            )

    def _node_proxy(
        self, h: _Handler, record: RequestRecord, route: routes.Route, raw: bytes
    ) -> None:
        pod = self.registry.get(PODS, route.namespace or "", route.name or "")
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        node = self.store.get(NODES.name, "", node_name) if node_name else None
        query = parse_qs(urlsplit(h.path).query)
        target = nodeproxy.location(pod, node, route.sub or "", query)
        if self.kubelet_client is None:
            raise ApiError(500, "the fake API server was given no kubelet-client certificate")
        record.code = 101 if "upgrade" in (h.headers.get("Connection") or "").lower() else 200
        h.close_connection = True
        nodeproxy.proxy(
            h.connection, h.rfile, h.command, target, h.headers, raw, self.kubelet_client
        )

    @staticmethod
    def _check_create_scope(res: Resource, route: routes.Route) -> None:
        if res.namespaced and route.namespace is None:
            raise ApiError(
                405,
                NOT_ALLOWED,
                "MethodNotAllowed",
            )

    def _delete_collection(
        self, res: Resource, namespace: str | None, params: dict[str, str]
    ) -> Obj:
        match = selectors.combined(
            res.name, params.get("labelSelector"), params.get("fieldSelector")
        )
        listing = self.registry.list(res, namespace, match, None, None)
        options = _delete_options(params, b"")
        for item in listing["items"]:
            meta = item["metadata"]
            try:
                self.registry.delete(res, meta.get("namespace", ""), meta["name"], options)
            except ApiError:
                continue
        return self.registry.list(res, namespace, match, None, None)

    # --- watch ------------------------------------------------------------------------------

    def _watch(
        self,
        h: _Handler,
        record: RequestRecord,
        res: Resource,
        namespace: str | None,
        params: dict[str, str],
    ) -> None:
        match = selectors.combined(
            res.name, params.get("labelSelector"), params.get("fieldSelector")
        )
        rv_param = params.get("resourceVersion")
        start_rv = None if rv_param in (None, "", "0") else _parse_rv(rv_param)
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        bookmarks = params.get("allowWatchBookmarks") in routes.TRUE
        try:
            watcher, initial = self.store.watch(res.name, namespace, start_rv)
        except ApiError as exc:  # the watch cache answers 200 and then an ERROR event
            self._start_chunked(h, record)
            self._chunk(h, {"type": "ERROR", "object": exc.status()})
            self._end_chunked(h)
            h.close_connection = True
            return
        stream = _Stream(watcher, h.connection)
        with self._conn_lock:
            self._streams.add(stream)
        try:
            self._start_chunked(h, record)
            feed = _Feed(h, res, namespace, match, watcher)
            self._stream(feed, initial, timeout, bookmarks)
        except (OSError, _Abort):
            h.close_connection = True
            _cut(h.connection)
        finally:
            self.store.unwatch(watcher)
            with self._conn_lock:
                self._streams.discard(stream)

    def _stream(
        self, feed: _Feed, initial: list[Event], timeout: float | None, bookmarks: bool
    ) -> None:
        h, watcher = feed.h, feed.watcher
        epoch = self.faults.freeze_epoch
        started = time.monotonic()
        deadline = started + timeout if timeout is not None else None
        next_bookmark = started + self.bookmark_interval
        for ev in initial:
            self._emit(feed, ev)
        while True:
            if watcher.stopped.is_set() or self._stopping.is_set():
                raise _Abort
            if self.faults.frozen or self.faults.freeze_epoch != epoch:
                self._wait_thaw_and_abort()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self._end_chunked(h)
                return
            if bookmarks and now >= next_bookmark:
                self._bookmark(feed)
                next_bookmark = now + self.bookmark_interval
                continue
            wait = 0.2
            if deadline is not None:
                wait = min(wait, deadline - now)
            if bookmarks:
                wait = min(wait, next_bookmark - now)
            try:
                item = watcher.events.get(timeout=max(wait, 0.001))
            except queue.Empty:
                continue
            if item is None:
                continue
            if self.faults.frozen or self.faults.freeze_epoch != epoch:
                self._wait_thaw_and_abort()
            self._emit(feed, item)

    def _wait_thaw_and_abort(self) -> None:
        """Silent while frozen; the connection is considered dead once the link comes back."""
        while not self.faults.unfrozen.wait(0.05):
            if self._stopping.is_set():
                break
        raise _Abort

    def _bookmark(self, feed: _Feed) -> None:
        """Flush pending events, then a BOOKMARK at the current RV (never behind an event)."""
        pending: list[Event] = []
        with self.store.lock:
            while True:
                try:
                    ev = feed.watcher.events.get_nowait()
                except queue.Empty:
                    break
                if ev is not None:
                    pending.append(ev)
            rv = self.store.current_rv()
        for ev in pending:
            self._emit(feed, ev)
        obj = {
            "kind": feed.res.kind,
            "apiVersion": feed.res.api_version,
            "metadata": {"resourceVersion": str(rv)},
        }
        self._chunk(feed.h, {"type": "BOOKMARK", "object": obj})

    def _emit(self, feed: _Feed, ev: Event) -> None:
        """cacheWatcher.convertToWatchEvent: selector transitions become ADDED / DELETED."""
        h, res, namespace, match = feed.h, feed.res, feed.namespace, feed.match

        def passes(obj: Obj | None) -> bool:
            if obj is None:
                return False
            in_ns = namespace is None or obj.get("metadata", {}).get("namespace") == namespace
            return in_ns and match(obj)

        cur = ev.type != "DELETED" and passes(ev.obj)
        old = passes(ev.prev)
        if cur:
            kind = "MODIFIED" if old else "ADDED"
            self._chunk(h, {"type": kind, "object": typed(res, ev.obj)})
        elif old and ev.prev is not None:
            self._chunk(h, {"type": "DELETED", "object": typed(res, with_rv(ev.prev, ev.rv))})

    @staticmethod
    def _start_chunked(h: _Handler, record: RequestRecord) -> None:
        record.code = 200
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Cache-Control", "no-cache, private")
        h.end_headers()

    @staticmethod
    def _chunk(h: _Handler, event: Obj) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()

    @staticmethod
    def _end_chunked(h: _Handler) -> None:
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()


def _cut(conn: socket.socket) -> None:
    """Shut a socket down in both directions; the peer sees EOF at once."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise errors.bad_request(f"error decoding request body: {exc}") from None


def _json_or_none(raw: bytes) -> Any:
    """The body if it is JSON (authorization looks at a created object's name), else None."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _delete_options(params: dict[str, str], raw: bytes) -> Obj:
    """DeleteOptions from the query string, overridden by a JSON body."""
    options: Obj = {}
    if params.get("gracePeriodSeconds"):
        options["gracePeriodSeconds"] = int(params["gracePeriodSeconds"])
    if params.get("propagationPolicy"):
        options["propagationPolicy"] = params["propagationPolicy"]
    body = _json(raw) if raw.strip() else None
    if isinstance(body, dict):
        options.update({k: v for k, v in body.items() if v is not None})
    return options
