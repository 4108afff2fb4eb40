"""Fault injection state and the request log of the fake API server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.fakeapi.errors import ApiError


@dataclass
class RequestRecord:
    """One request as the API server's audit log would name it."""

    time: float
    method: str
    verb: str
    resource: str
    subresource: str
    namespace: str | None
    name: str | None
    path: str
    user_agent: str
    user: str | None
    code: int = 0  # 0: no answer (connection closed, e.g. held during a freeze)


Predicate = Callable[[RequestRecord], bool]

_FAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "Timeout: request did not complete within the allotted timeout",
}


@dataclass
class FailRule:
    """Answer the next `remaining` matching requests with `status`."""

    remaining: int
    status: int
    verb: str | None = None
    resource: str | None = None
    predicate: Predicate | None = None

    def matches(self, record: RequestRecord) -> bool:
        """Whether this rule applies to the request."""
        if self.remaining <= 0:
            return False
        if self.verb is not None and record.verb != self.verb:
            return False
        if self.resource is not None and record.resource != self.resource:
            return False
        return self.predicate is None or self.predicate(record)

    def error(self) -> ApiError:
        """The injected Status error (429 carries Retry-After like API priority and fairness)."""
        message = _FAULT_MESSAGES.get(self.status, f"injected fault {self.status}")
        if self.status == 429:
            return ApiError(
                429, message, details={"retryAfterSeconds": 1}, headers={"Retry-After": "1"}
            )
        return ApiError(self.status, message)


@dataclass
class Faults:
    """Mutable fault state shared by the handler threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rules: list[FailRule] = field(default_factory=list)
    latency: float = 0.0
    frozen: bool = False
    freeze_epoch: int = 0
    unfrozen: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.unfrozen.set()

    def take(self, record: RequestRecord) -> ApiError | None:
        """Consume the first matching failure rule."""
        with self.lock:
            for rule in self.rules:
                if rule.matches(record):
                    rule.remaining -= 1
                    return rule.error()
            self.rules = [r for r in self.rules if r.remaining > 0]
        return None

    def freeze(self) -> None:
        """Start a half-open-link period."""
        with self.lock:
            self.frozen = True
            self.freeze_epoch += 1
            self.unfrozen.clear()

    def unfreeze(self) -> None:
        """End it; held requests are then dropped by their threads."""
        with self.lock:
            self.frozen = False
            self.unfrozen.set()

    def reset(self) -> None:
        """No latency, no pending failures, not frozen."""
        with self.lock:
            self.rules.clear()
            self.latency = 0.0
        self.unfreeze()


class RequestLog:
    """Thread-safe list of request records."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []

    def add(self, record: RequestRecord) -> None:
        """Append a record (its code is filled in when the answer is sent)."""
        with self._lock:
            self._records.append(record)

    def find(
        self,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        since: float | None = None,
    ) -> list[RequestRecord]:
        """Records matching every given filter (subresource "" = main resource, None = any)."""
        with self._lock:
            records = list(self._records)
        return [
            r
            for r in records
            if (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (subresource is None or r.subresource == subresource)
            and (namespace is None or r.namespace == namespace)
            and (name is None or r.name == name)
            and (since is None or r.time >= since)
        ]

    def reset(self) -> None:
        """Forget every record."""
        with self._lock:
            self._records.clear()


def monotonic() -> float:
    """Clock for deadlines."""
    return time.monotonic()
