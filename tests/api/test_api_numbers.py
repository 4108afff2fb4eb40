"""Numbers from the API cannot break the agent (issue 26, item 2).

The API server stores an int64 grace period as given (10**10, 2**63 - 1, a negative one) and
keeps a quantity such as `1e999990` as written. Each number is bounded where it enters
(`kubelet_sim.formats.durations`, `kubelet_sim.formats.quantity`): the pure functions first,
over any number (hypothesis), then the two holes the issue names, closed on a real node (Docker and
either API server): a 10**10 s grace period no longer kills the SIGKILL timer that every pod's
stop needs, and a pod asking for `1e999990` CPUs is refused (OutOfcpu) without holding up the
pods after it.
"""

from __future__ import annotations

import math
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubelet_sim import cri
from kubelet_sim.formats.durations import (
    MAX_SECONDS,
    MAX_TIMER_WAIT,
    bounded,
    grace_seconds,
    optional_grace_seconds,
    optional_seconds,
    timer_wait,
)
from kubelet_sim.formats.quantity import INT64_MAX, INT64_MIN, milli_value, parse_quantity, value
from kubelet_sim.loops.supervise import RUNNING
from kubelet_sim.pod.admission import Allocatable, Requests, admit_in_order
from kubelet_sim.pod.container_config import MAX_QUOTA
from kubelet_sim.pod.probes import ProbeKind, parse_probe
from kubelet_sim.pod.spec import PodView
from kubelet_sim.podworkers.hooks import HookRunner
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.manifests import pod_manifest, served
from tests.pods import (
    container,
    containers_named,
    get_pod,
    make_pod,
    running_ready,
    wait_for_events,
    wait_status,
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Anything a JSON number field may hold once a server (or a fake, or a future one) sent it.
json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([10**10, 2**63 - 1, -(2**63), 2**31 - 1, 2**31, 0, -1, 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)


# -- seconds ----------------------------------------------------------------------------------


@PROPERTY
@given(json_values, st.integers(0, MAX_SECONDS))
def test_bounded_seconds_are_total_and_in_range(raw: Any, default: int) -> None:
    got = bounded(raw, default)
    assert isinstance(got, int)
    assert 0 <= got <= MAX_SECONDS
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= MAX_SECONDS:
        assert got == raw, "a number in range is kept exactly"
    if raw is None:
        assert got == default


@PROPERTY
@given(json_values)
def test_grace_periods_keep_zero_lift_negatives_to_one_and_cap_the_rest(raw: Any) -> None:
    got = grace_seconds(raw)
    assert 0 <= got <= MAX_SECONDS
    number = isinstance(raw, int | float) and not isinstance(raw, bool) and not math.isnan(raw)
    if not number:
        assert got == 30, "no number: the API server's default"
        assert optional_grace_seconds(raw) is None
        return
    assert optional_grace_seconds(raw) == got
    whole = math.ceil(raw) if isinstance(raw, float) and math.isfinite(raw) else raw
    if whole < 0:
        assert got == 1  # pod_workers.go: "we always supply a grace period of 1"
    elif whole >= MAX_SECONDS:
        assert got == MAX_SECONDS
    else:
        assert got == whole


@PROPERTY
@given(json_values)
def test_optional_seconds_keep_absence(raw: Any) -> None:
    got = optional_seconds(raw)
    if got is not None:
        assert 0 <= got <= MAX_SECONDS
    elif raw is not None:
        assert not isinstance(raw, int | float) or isinstance(raw, bool) or math.isnan(raw)


@PROPERTY
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_timer_never_waits_past_its_bound(wait: float) -> None:
    got = timer_wait(wait)
    assert 0.0 <= got <= MAX_TIMER_WAIT < threading.TIMEOUT_MAX


def pod_with(meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return served(pod_manifest("p", [{"name": "c", "image": "i"}], **spec), uid="u", **meta)


@PROPERTY
@given(json_values, json_values, json_values)
def test_a_pod_view_bounds_its_grace_periods_and_deadline(
    grace: Any, deletion_grace: Any, deadline: Any
) -> None:
    view = PodView.from_api(
        pod_with(
            {
                "deletionTimestamp": "1759-03-27T07:33:47Z",
                "deletionGracePeriodSeconds": deletion_grace,
            },
            {"terminationGracePeriodSeconds": grace, "activeDeadlineSeconds": deadline},
        )
    )
    assert 0 <= view.termination_grace_period <= MAX_SECONDS
    assert view.deletion_grace_period is None or 0 <= view.deletion_grace_period <= MAX_SECONDS
    assert view.active_deadline_seconds is None or 0 <= view.active_deadline_seconds <= MAX_SECONDS


def test_the_grace_periods_a_v124_server_stored() -> None:
    """What a real v1.24 API server answered (tried): the numbers as given."""
    huge = pod_with(
        {"deletionTimestamp": "1759-03-27T07:33:47Z", "deletionGracePeriodSeconds": 10**10},
        {"terminationGracePeriodSeconds": 2**63 - 1},
    )
    view = PodView.from_api(huge)
    assert (view.termination_grace_period, view.deletion_grace_period) == (MAX_SECONDS,) * 2
    negative = PodView.from_api(pod_with({}, {"terminationGracePeriodSeconds": -5}))
    assert negative.termination_grace_period == 1
    zero = PodView.from_api(pod_with({}, {"terminationGracePeriodSeconds": 0}))
    assert zero.termination_grace_period == 0
    assert PodView.from_api(pod_with({}, {})).termination_grace_period == 30


@PROPERTY
@given(st.dictionaries(
    st.sampled_from([
        "initialDelaySeconds", "periodSeconds", "timeoutSeconds", "successThreshold",
        "failureThreshold", "terminationGracePeriodSeconds",
    ]),
    json_values,
))  # fmt: skip
def test_probe_numbers_are_bounded_and_a_period_is_at_least_a_second(numbers: Any) -> None:
    spec = parse_probe(ProbeKind.LIVENESS, {"exec": {"command": ["true"]}, **numbers}, {})
    assert 0 <= spec.initial_delay <= MAX_SECONDS
    assert 1 <= spec.period <= MAX_SECONDS
    assert 1 <= spec.timeout <= MAX_SECONDS
    assert 1 <= spec.success_threshold <= MAX_SECONDS
    assert 1 <= spec.failure_threshold <= MAX_SECONDS
    grace = spec.termination_grace_period
    assert grace is None or 0 <= grace <= MAX_SECONDS


# -- quantities -------------------------------------------------------------------------------

DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
digits = st.text(alphabet="0123456789", max_size=150)


@st.composite
def quantities(draw: st.DrawFn) -> tuple[str, Fraction]:
    """A quantity as the API server accepts it, and its exact value (exponents of a size that
    a test can still compute exactly; the truly huge ones are below)."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole, fraction = draw(digits), draw(st.none() | digits)
    if not whole and not fraction:
        whole = "0"
    number = whole + ("" if fraction is None else "." + fraction)
    fraction = fraction or ""
    exact = Fraction(int(whole + fraction or "0"), 10 ** len(fraction))
    if draw(st.booleans()):
        exponent = draw(st.integers(-220, 40))
        text = f"{number}{draw(st.sampled_from('eE'))}{exponent}"
        exact *= Fraction(10) ** exponent
    else:
        suffix = draw(st.sampled_from([*DECIMAL, *BINARY]))
        text = number + suffix
        exact *= Fraction(10) ** DECIMAL[suffix] if suffix in DECIMAL else 2 ** BINARY[suffix]
    return sign + text, -exact if sign == "-" else exact


def int64(number: int) -> int:
    return max(INT64_MIN, min(INT64_MAX, number))


@PROPERTY
@given(quantities())
def test_quantities_round_up_exactly_within_int64(case: tuple[str, Fraction]) -> None:
    """MilliValue/Value: rounded up, exact for every value (long mantissas, tiny ones, binary
    suffixes), saturated at the int64 range."""
    text, exact = case
    assert milli_value(text) == int64(math.ceil(exact * 1000))
    assert value(text) == int64(math.ceil(exact))
    parsed = parse_quantity(text)
    assert abs(parsed) <= 2**63
    if Fraction(1, 10**40) <= abs(exact) < 2**63 and len(text) < 100:
        assert parsed == exact


@PROPERTY
@given(
    st.sampled_from(["", "+", "-"]),
    st.text(alphabet="0123456789", min_size=1, max_size=30),
    st.sampled_from(["", "-", "+"]),
    st.text(alphabet="0123456789", min_size=1, max_size=6000),
)
def test_any_exponent_is_decided_at_once(sign: str, mantissa: str, esign: str, exp: str) -> None:
    """Exponents the size of the API's int32 and beyond (and longer than an int() may read)."""
    text = f"{sign}{mantissa}e{esign}{exp}"
    began = time.monotonic()
    milli, whole = milli_value(text), value(text)
    assert time.monotonic() - began < 1.0
    assert INT64_MIN <= milli <= INT64_MAX
    assert INT64_MIN <= whole <= INT64_MAX
    if int(mantissa) == 0:
        assert milli == whole == 0


@PROPERTY
@given(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)))
def test_numeric_quantities_are_bounded_too(number: int | float) -> None:
    assert INT64_MIN <= milli_value(number) <= INT64_MAX
    assert INT64_MIN <= value(number) <= INT64_MAX


@PROPERTY
@given(st.text(max_size=40))
def test_any_text_is_a_bounded_amount_or_a_value_error(text: str) -> None:
    try:
        milli = milli_value(text)
    except ValueError:
        return
    assert INT64_MIN <= milli <= INT64_MAX


MILLION = 1_000_000


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1e999990", INT64_MAX),  # the issue's: valid, kept as written by the API server
        ("1e2147483647", INT64_MAX),
        ("1e-999990", 1),  # a positive amount, however small, rounds up to 1m
        ("-1e-999990", 0),
        ("9223372036854775807", INT64_MAX),
        ("99999999999999999999999999999999Ei", INT64_MAX),
        ("1" + "0" * MILLION, INT64_MAX),
        ("0." + "0" * MILLION + "1", 1),
        ("0." + "9" * MILLION, 1000),
        ("0." + "9" * MILLION + "Mi", 2**20 * 1000),
        ("1e" + "9" * MILLION, INT64_MAX),
        ("1e-" + "9" * MILLION, 1),
        ("0e" + "9" * MILLION, 0),
        ("-1e999990", INT64_MIN),
    ],
    ids=lambda v: v if isinstance(v, int) or len(v) < 30 else f"{v[:12]}..({len(v)} chars)",
)
def test_hostile_quantities_in_bounded_time(text: str, milli: int) -> None:
    began = time.monotonic()
    assert milli_value(text) == milli
    assert time.monotonic() - began < 1.0, "linear in the text, with no big power built"


def test_requests_add_up_within_int64() -> None:
    huge = Requests(INT64_MAX, INT64_MAX)
    assert huge + huge == huge
    assert huge + Requests(1, 1) == huge


NODE = Allocatable(cpu_milli=2000, memory_bytes=4 * 2**30, pods=10)


@PROPERTY
@given(st.sampled_from(["cpu", "memory"]), quantities())
def test_admission_decides_every_pod_whatever_one_asks(
    resource: str, case: tuple[str, Fraction]
) -> None:
    """One pod's request never blocks the pods after it: each is decided, none raises."""
    text = case[0]
    asks = PodView.from_api(
        {
            "metadata": {"name": "a", "uid": "a", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {resource: text}}}]},
        }
    )
    after = PodView.from_api(
        {
            "metadata": {"name": "b", "uid": "b", "creationTimestamp": "2024-01-01T00:00:01Z"},
            "spec": {"containers": [{"name": "c"}]},
        }
    )
    decisions = admit_in_order(
        [asks, after], admitted=[], already_here=set(), allocatable=NODE, allow_privileged=False
    )
    assert decisions["b"] is None
    rejection = decisions["a"]
    capacity = NODE.cpu_milli if resource == "cpu" else NODE.memory_bytes
    wanted = milli_value(text) if resource == "cpu" else value(text)
    if wanted > capacity:
        assert rejection is not None
        assert rejection.reason == f"OutOf{resource}"
    else:
        assert rejection is None


def test_a_check_that_fails_refuses_only_its_pod() -> None:
    broken = PodView.from_api(
        {
            "metadata": {"name": "a", "uid": "a", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "two"}}}]},
        }
    )
    fine = PodView.from_api(
        {"metadata": {"name": "b", "uid": "b"}, "spec": {"containers": [{"name": "c"}]}}
    )
    decisions = admit_in_order(
        [broken, fine], admitted=[], already_here=set(), allocatable=NODE, allow_privileged=False
    )
    assert decisions["b"] is None
    refused = decisions["a"]
    assert refused is not None
    assert refused.reason == "UnexpectedAdmissionError"
    assert refused.message.startswith("Pod was rejected: GeneralPredicates failed due to ")
    assert refused.message.endswith(", which is unexpected.")


# -- one pod's failure stops no one else's ------------------------------------------------------


def test_a_hook_that_raises_or_hangs_leaves_the_next_hook_to_run() -> None:
    """Each hook has a thread of its own: neither a hook that raises nor four that hang (more
    than the pool of four the hooks once shared) delay another pod's hook."""
    runner = HookRunner(runtime=None, events=None)  # type: ignore[arg-type]
    done, release = threading.Event(), threading.Event()

    def broken() -> None:
        raise OverflowError("timestamp out of range for platform time_t")

    def slow() -> None:
        release.wait()

    try:
        for i in range(3):
            assert runner.submit(broken, f"broken-{i}")
        for i in range(4):
            runner.submit(slow, f"slow-{i}")
        runner.submit(done.set, "quick")
        assert done.wait(5), "the next pod's hook ran"
        assert runner.running("slow-0") == 1
        wait_until = time.monotonic() + 5
        while runner.running("broken-0") and time.monotonic() < wait_until:
            time.sleep(0.01)
        assert runner.running("broken-0") == 0, "a hook that raised is done"
    finally:
        release.set()
        runner.shutdown()
    assert not runner.submit(done.set, "late"), "no hook starts once shut down"


# -- on a node: Docker and the API server -------------------------------------------------------

IGNORES_SIGTERM = ["sleep", "3600"]  # PID 1 without a handler: SIGTERM does nothing


def _delete(cluster: ApiUnderTest, name: str, grace: int | None = None) -> None:
    cluster.core.delete_namespaced_pod(name, cluster.namespace, grace_period_seconds=grace)


def test_a_grace_period_of_1e10_leaves_every_other_stop_on_time(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    """The issue's hole: the stop timer died of the first pod's 10**10 s, and the second pod,
    which ignores SIGTERM, was never killed. Now the first waits out its (bounded) grace, and
    the second is gone two seconds after its delete."""
    make_pod(
        cluster, "forever", container(command=IGNORES_SIGTERM), terminationGracePeriodSeconds=10**10
    )
    make_pod(
        cluster, "stubborn", container(command=IGNORES_SIGTERM), terminationGracePeriodSeconds=2
    )
    for name in ("forever", "stubborn"):
        wait_status(cluster, name, running_ready, 30, "Running and Ready")
    _delete(cluster, "forever")  # deletionGracePeriodSeconds 10**10, as the API keeps it
    wait_for_events(cluster, "forever", "Killing")  # its SIGKILL is booked on the timer
    asked = time.monotonic()
    _delete(cluster, "stubborn")
    wait_for(lambda: get_pod(cluster, "stubborn") is None, 20, "stubborn killed and gone")
    assert time.monotonic() - asked >= 2.0, "SIGKILL only once its 2 s grace ended"
    still = get_pod(cluster, "forever")
    assert still is not None, "still in its grace period"
    assert still["metadata"]["deletionGracePeriodSeconds"] == 10**10
    assert _runs(agent, still), "its container was not killed"
    timers = {n: h for n, h in agent.agent.health().items() if n.startswith("stop-timer")}
    assert [(h.state, h.restarts) for h in timers.values()] == [(RUNNING, 0)]
    _delete(cluster, "forever", grace=1)  # and a shorter grace still cuts its stop short
    wait_for(lambda: get_pod(cluster, "forever") is None, 20, "forever gone after a 1 s grace")


def _runs(agent: RunningAgent, pod: dict[str, Any]) -> bool:
    observed = agent.agent.syncer.watcher.pod_containers(pod["metadata"]["uid"])
    return any(c.state is cri.ContainerState.RUNNING and not c.is_sandbox for c in observed)


def test_a_pod_asking_for_1e999990_cpus_is_refused_and_the_next_one_runs(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """The issue's other hole: admission raised on every sync, and no pod after this one was
    admitted. Both are created before the node looks, so they are decided as one burst."""
    make_pod(cluster, "greedy", container(resources={"requests": {"cpu": "1e999990"}}))
    make_pod(cluster, "next")
    running = start_agent(cluster, docker_env, tmp_path / "root", node={"cpu": "2"})
    try:
        refused = wait_status(
            cluster, "greedy", lambda s: s.get("phase") == "Failed", 15, "refused within seconds"
        )
        assert refused["reason"] == "OutOfcpu"
        assert refused["message"] == (
            "Pod was rejected: Node didn't have enough resource: cpu,"
            f" requested: {INT64_MAX}, used: 0, capacity: 2000"
        )
        wait_status(cluster, "next", running_ready, 30, "Running and Ready")
        wait_for_events(cluster, "greedy", "OutOfcpu")
    finally:
        running.stop()


def test_a_cpu_limit_of_1e999990_limits_nothing(
    cluster: ApiUnderTest, agent: RunningAgent, docker_env: DockerEnv
) -> None:
    """A limit past the kernel's largest CFS quota runs as that quota (Docker refuses more)."""
    pod = make_pod(
        cluster,
        "unbounded",
        container(resources={"requests": {"cpu": "100m"}, "limits": {"cpu": "1e999990"}}),
    )
    wait_status(cluster, "unbounded", running_ready, 30, "Running and Ready")
    (app,) = containers_named(docker_env, pod["metadata"]["uid"])
    host = docker_env.client.api.inspect_container(app.id)["HostConfig"]
    assert (host["CpuQuota"], host["CpuPeriod"]) == (MAX_QUOTA, 100_000)
