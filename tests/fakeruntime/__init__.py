"""An in-memory container runtime and a clock moved by hand, for the pod workers' unit tests.

`FakeRuntime` implements the pod workers' runtime port (kubelet_sim/podworkers/ports.py) as
the CRI's fake runtime does upstream; tests/runtime/test_runtime_contract.py holds it to the Docker
adapter's behaviour, so what the unit tests learn from it is true of Docker too.
"""

from tests.fakeruntime.cache import FakeContainerCache
from tests.fakeruntime.clock import FakeClock
from tests.fakeruntime.runtime import Behaviour, FakeRuntime

__all__ = ["Behaviour", "FakeClock", "FakeContainerCache", "FakeRuntime"]
