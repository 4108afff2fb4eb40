"""List-and-watch into a local cache, as client-go's Reflector does, owning the whole loop.

The stack, from the outside in: `_run` keeps going until stopped (backoff on errors, relist on
410) → `_list` / `_watch_once` speak list and watch with resourceVersion → `watch_lines` reads
the raw chunked stream under a read timeout, so a silent half-open connection cannot hang us.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.rest import REQUEST_TIMEOUT, ApiError
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"

# (type, object): DELETED carries the last state we knew.
Handler = Callable[[str, Json], None]


@dataclass(frozen=True)
class StreamEvent:
    """What the informer did or received, as it happened, for `kubelet-sim watch`.

    `kind`: LIST and RELIST (`detail`: items), WATCH (a new watch from `resource_version`),
    ADDED/MODIFIED/DELETED/BOOKMARK/ERROR as the server sent them (`obj`), EXPIRED (410, a
    relist follows) and RECONNECT (an error, retried after a backoff).
    """

    kind: str
    resource_version: str
    obj: Json | None = None
    detail: dict[str, Any] = field(default_factory=dict)


Observer = Callable[[StreamEvent], None]


@dataclass(frozen=True)
class ListWatchSource:
    """What to list and watch: a generated `list_*` method of the client, with fixed arguments."""

    description: str
    list_method: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WatchTimeouts:
    """Server-side watch lifetime (client-go picks 5-10 min at random) and our read timeout.

    The read timeout is the longest silence we accept from a watch before we reconnect from the
    same resourceVersion; that is cheap, and it is how a half-open link is noticed.
    """

    server_min: int = 300
    server_max: int = 600
    read: float = 75.0
    connect: float = 5.0


@dataclass
class InformerStats:
    lists: int = 0
    relists: int = 0
    watches: int = 0
    expired: int = 0
    reconnects: int = 0
    events: Counter[str] = field(default_factory=Counter)


class _Outcome(Enum):
    CLOSED = "closed"
    EXPIRED = "expired"


def object_key(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def _uid(obj: Json | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("uid")


def _rv(obj: Json) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Informer:
    """Keeps `cache` equal to the server's truth and tells `handler` about every change.

    Handlers run on the informer's thread and must be quick (enqueue a key); objects in the
    cache are shared and must not be mutated.
    """

    def __init__(
        self,
        source: ListWatchSource,
        handler: Handler | None = None,
        *,
        timeouts: WatchTimeouts | None = None,
        backoff: Backoff | None = None,
        observer: Observer | None = None,
        supervisor: Supervisor,
        **log_context: Any,
    ) -> None:
        self.source = source
        self.handler = handler
        self.observer = observer
        self.timeouts = timeouts or WatchTimeouts()
        self.backoff = backoff or Backoff(initial=0.8, cap=30.0)
        self.stats = InformerStats()
        self.synced = threading.Event()
        # The server refused the list (401/403): a caller waiting for the first list should not
        # (cleared by a list that succeeds, e.g. once RBAC grants it).
        self.refused = threading.Event()
        self.answered = threading.Event()  # the first list came, or was refused: wait on this
        self.resource_version = ""
        self._cache: dict[str, Json] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._thread: threading.Thread | None = None
        self._rng = random.Random()
        self._listed = False
        self.log = get_logger("kubelet_sim.informer", watch=source.description, **log_context)
        self.supervisor = supervisor

    # -- the cache -------------------------------------------------------------------------

    def get(self, key: str) -> Json | None:
        with self._lock:
            return self._cache.get(key)

    def items(self) -> list[Json]:
        with self._lock:
            return list(self._cache.values())

    def keys(self) -> set[str]:
        with self._lock:
            return set(self._cache)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Informer:
        self._thread = self.supervisor.thread(
            f"informer {self.source.description}",
            self._run,
            self._stop,
            on_crash=self._distrust_cache,
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            # Unblocks a read in progress on the watch thread; it may be closed already.
            with contextlib.suppress(Exception):
                response.shutdown()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # -- the loop --------------------------------------------------------------------------

    def _distrust_cache(self) -> None:
        """The loop died mid-stream: not synced until a fresh list is in (`_run` lists first)."""
        self.synced.clear()

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                outcome = self._watch_once()
            except ApiError as exc:
                if exc.gone:
                    self._expired(str(exc))
                    need_list = True
                else:
                    self._wait_after_error(exc)
                continue
            except urllib3.exceptions.ReadTimeoutError as exc:
                if need_list or self._stop.is_set():  # a list too slow: back off
                    self._wait_after_error(exc)
                    continue
                # A watch silent for the read timeout: an idle resource (the server sends no
                # bookmark before its cache has seen an event) or a half-open link. Watch again
                # at once, as after a clean close: no backoff, which would delay the next event.
                self.stats.reconnects += 1
                self.log.debug(
                    "watch silent; watching again", resource_version=self.resource_version
                )
                continue
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if not self._stop.is_set():
                    self._wait_after_error(exc)
                continue
            if outcome is _Outcome.EXPIRED:
                self._expired("ERROR event with 410")
                need_list = True
            # A clean close: watch again at once from the last resourceVersion, no relist.
        self.log.debug("informer stopped")

    def _observe(self, kind: str, obj: Json | None = None, **detail: Any) -> None:
        if self.observer is None:
            return
        try:
            self.observer(StreamEvent(kind, self.resource_version, obj, detail))
        except Exception:
            self.log.exception("stream observer failed", event_type=kind)

    def _expired(self, why: str) -> None:
        self._observe("EXPIRED", why=why)
        self.stats.expired += 1
        self.log.info(
            "resourceVersion expired; relisting", resource_version=self.resource_version, why=why
        )

    def _wait_after_error(self, exc: BaseException) -> None:
        self.stats.reconnects += 1
        if isinstance(exc, ApiError) and exc.status in (401, 403):
            self.refused.set()
            self.answered.set()
        if isinstance(exc, ApiError) and exc.status == 429:
            delay = max(self.backoff.next_delay(), 1.0)
        else:
            delay = self.backoff.next_delay()
        self._observe("RECONNECT", error=str(exc)[:300], retry_in_seconds=round(delay, 2))
        self.log.warning(
            "watch failed; retrying",
            error=str(exc)[:300],
            error_type=type(exc).__name__,
            retry_in_seconds=round(delay, 2),
            resource_version=self.resource_version,
        )
        self._stop.wait(delay)

    def _call(self, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        try:
            response: urllib3.BaseHTTPResponse = self.source.list_method(
                *self.source.args, **self.source.kwargs, _preload_content=False, **kwargs
            )
        except ApiException as exc:
            raise ApiError.from_exception(exc) from exc
        return response

    def _list(self) -> None:
        response = self._call(_request_timeout=REQUEST_TIMEOUT)
        body = json.loads(response.data)
        response.release_conn()
        self.stats.lists += 1
        relist, self._listed = self._listed, True
        if relist:
            self.stats.relists += 1
        items: list[Json] = body.get("items") or []
        self._replace(items)
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        self.backoff.reset()
        self.refused.clear()
        self.synced.set()
        self.answered.set()
        self._observe("RELIST" if relist else "LIST", items=len(items))  # after: synced holds
        self.log.debug("listed", items=len(items), resource_version=self.resource_version)

    def _watch_once(self) -> _Outcome:
        timeouts = self.timeouts
        response = self._call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._rng.randint(timeouts.server_min, timeouts.server_max),
            _request_timeout=(timeouts.connect, timeouts.read),
        )
        self.stats.watches += 1
        self._observe("WATCH")
        self._response = response
        try:
            if self._stop.is_set():
                return _Outcome.CLOSED
            for line in watch_lines(response, keep_tail=True):
                if self._stop.is_set():
                    return _Outcome.CLOSED
                if self._handle_line(line) is _Outcome.EXPIRED:
                    return _Outcome.EXPIRED
            return _Outcome.CLOSED
        finally:
            self._response = None
            # Never hand a watch connection back for reuse: after a cut or a stop its stream is
            # mid-chunk, and the next request on it would read chunk sizes as a status line.
            response.close()
            response.release_conn()

    def _handle_line(self, line: bytes) -> _Outcome | None:
        event = json.loads(line)
        kind, obj = str(event.get("type")), event.get("object") or {}
        self.stats.events[kind] += 1
        self._observe(kind, obj)
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                return _Outcome.EXPIRED
            raise ApiError(code, str(obj.get("reason") or ""), str(obj.get("message") or ""))
        if kind == "BOOKMARK":
            self.resource_version = _rv(obj) or self.resource_version
            return None
        if kind not in (ADDED, MODIFIED, DELETED):
            raise ValueError(f"unknown watch event type {kind!r}")
        self._apply(kind, obj)
        self.resource_version = _rv(obj) or self.resource_version
        self.backoff.reset()
        return None

    # -- cache updates and deliveries --------------------------------------------------------

    def _apply(self, kind: str, obj: Json) -> None:
        key = object_key(obj)
        with self._lock:
            old = self._cache.get(key)
            if kind == DELETED:
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
        if kind == DELETED:
            self._deliver(DELETED, obj)
            return
        if old is not None and _uid(old) != _uid(obj):
            self._deliver(DELETED, old)  # same name, new object: the old one is gone
            old = None
        self._deliver(ADDED if old is None else MODIFIED, obj)

    def _replace(self, items: list[Json]) -> None:
        """Swap in a fresh list and deliver the difference, deletes included (the 410 case)."""
        fresh = {object_key(item): item for item in items}
        with self._lock:
            previous, self._cache = self._cache, fresh
        for key, old in previous.items():
            if key not in fresh or _uid(fresh[key]) != _uid(old):
                self._deliver(DELETED, old)
        for key, item in fresh.items():
            old_item = previous.get(key)
            if old_item is None or _uid(old_item) != _uid(item):
                self._deliver(ADDED, item)
            elif _rv(old_item) != _rv(item):
                self._deliver(MODIFIED, item)

    def _deliver(self, kind: str, obj: Json) -> None:
        if self.handler is None:
            return
        try:
            self.handler(kind, obj)
        except Exception:
            self.log.exception("event handler failed", event_type=kind, key=object_key(obj))


def watch_lines(response: urllib3.BaseHTTPResponse, *, keep_tail: bool = False) -> Iterator[bytes]:
    """Newline-delimited events from a (chunked) watch response, as they arrive, blank lines
    left out; what follows the last newline when the stream ends only with `keep_tail`."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if keep_tail and buffer.strip():
        yield buffer


def close_watch(response: urllib3.BaseHTTPResponse, reader_ended: threading.Event) -> None:
    """Close a watch response another thread reads: its socket shut down first (a plain close
    would wait on the blocked reader), the reader given 5 s to see the end, then closed."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    reader_ended.wait(5)
    response.close()
