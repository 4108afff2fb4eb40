"""An in-memory fake of kube-apiserver for the integration tests (stdlib only)."""

from tests.fakeapi.faults import RequestRecord
from tests.fakeapi.server import FakeApiServer

__all__ = ["FakeApiServer", "RequestRecord"]
