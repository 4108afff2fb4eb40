"""The `cluster` fixture: a fresh namespace and node name on the fake or on a real API server.

`KUBELET_SIM_TEST_API` picks the server for the session: `fake` (the default: one in-process
`FakeApiServer`) or `real`: the cluster named by `KUBELET_SIM_TEST_KUBECONFIG` (e.g. kind), or
else a control plane started from real binaries (`tests/kubeenv.py`, envtest's convention).
Setting only `KUBELET_SIM_TEST_KUBECONFIG` also means `real`. On such a cluster,
`KUBELET_SIM_TEST_KUBELET_CLIENT_CA` names the CA that signs its API server's kubelet-client
certificate where the kubeconfig's CA does not (kubeadm's and kind's do): the tests' nodes trust
it, as a kubelet's --client-ca-file.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.kube.informer import close_watch, watch_lines
from kubelet_sim.pod.generation import KubeletGeneration
from tests.fakeapi import FakeApiServer
from tests.kubeenv import KubeEnv, KubeEnvError, find_binaries
from tests.manifests import pod_manifest
from tests.node_certs import NoNodeCredentials, kubeconfig_cluster, mint_node_kubeconfig
from tests.polling import poll
from tests.server_probes import (
    KUBELET_CLIENT_CA_ENV,
    PROBE_DEADLINE,
    ask_controller,
    ask_kubelet_client_ca,
    ask_scheduler,
    ask_service_account_admission,
    ask_signer,
    check_node_authorizer,
)

__all__ = [
    "NO_SCHEDULER",
    "ApiUnderTest",
    "EventStream",
    "api_mode",
    "cluster",
    "cluster_session",
    "control_plane_session",
    "fake_api",
    "new_cluster",
    "open_watch",
    "pod_body",
    "server_has_field",
    "wait_for",
]

KUBECONFIG_ENV = "KUBELET_SIM_TEST_KUBECONFIG"
API_ENV = "KUBELET_SIM_TEST_API"


def api_mode() -> str:
    """`fake` or `real`: which API server this test session talks to."""
    mode = os.environ.get(API_ENV) or ("real" if os.environ.get(KUBECONFIG_ENV) else "fake")
    if mode not in ("fake", "real"):
        raise pytest.UsageError(f"{API_ENV} must be 'fake' or 'real', not {mode!r}")
    return mode


DEADLINE_SCALE_ENV = "KUBELET_SIM_TEST_DEADLINE_SCALE"


def deadline_scale() -> float:
    """How much longer than written a test waits before it fails (default 1).

    A deadline is only a failure bound: a condition met early ends the wait at once. CI's
    machines run this suite several times slower than a developer's, so `.ci/run` stretches
    every bound instead of each test guessing how slow a machine may be.
    """
    try:
        scale = float(os.environ.get(DEADLINE_SCALE_ENV) or 1)
    except ValueError:
        raise pytest.UsageError(f"{DEADLINE_SCALE_ENV} must be a number") from None
    return max(scale, 1.0)


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, message: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail the test at the deadline."""
    timeout *= deadline_scale()
    value = poll(predicate, timeout)
    if not value:
        pytest.fail(f"timed out after {timeout}s waiting for {message}")
    return value


_FIELDS_SEEN: dict[tuple[str, str, str], bool] = {}


def server_has_field(api: Any, definition: str, field: str) -> bool:
    """Whether the API server's own schema (/openapi/v2) gives `definition` the field `field`
    (e.g. io.k8s.api.core.v1.Container `restartPolicy`, which v1.24 lacks). The schema, not
    /version, tells: servers built from source may report no version at all."""
    key = (str(api.configuration.host), definition, field)
    if key not in _FIELDS_SEEN:
        from kubelet_sim.kube.rest import request_json

        document = request_json(api, "GET", "/openapi/v2", timeout=(5, 60))
        properties = (document.get("definitions") or {}).get(definition, {}).get("properties")
        _FIELDS_SEEN[key] = field in (properties or {})
    return _FIELDS_SEEN[key]


def kubelet_generation(cluster: ApiUnderTest) -> KubeletGeneration:
    """Whose status rules the node follows on this cluster's server (pod/generation.py)."""
    from kubelet_sim.kube.schema import ServerSchema
    from kubelet_sim.pod.generation import generation_of

    schema = ServerSchema.of_server(cluster.core.api_client)
    return generation_of(schema.version(), schema.properties())


@dataclass
class _Session:
    kubeconfig: str
    fake: FakeApiServer | None
    env: KubeEnv | None = None  # a control plane this session started itself
    workdir: Path | None = None  # where node kubeconfigs minted through the CSR API go
    # Why a cluster of the user's gives no node credentials (None: not asked yet, or it does).
    no_node_credentials: str | None = None
    # KUBELET_SIM_TEST_KUBELET_CLIENT_CA on a cluster of the user's: what its nodes must trust
    # for the API server's kubelet-client certificate, besides the kubeconfig's CA.
    kubelet_client_ca: str | None = None
    _asked: bool = False
    _probes: dict[str, str | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def node_kubeconfig(self, node_name: str) -> str:
        """What a kubelet for `node_name` runs with: node credentials where we can get them.

        On a cluster given by kubeconfig (we hold no CA key) they come through the CSR API as
        deploy/node-credentials.sh makes them; where the cluster cannot (`no_node_credentials`
        says why) it is the session's own kubeconfig.
        """
        if self.fake is not None:  # the fake authorizes `system:node:` users as a real server
            path = Path(self.kubeconfig).with_name(f"{node_name}.kubeconfig")
            return str(self.fake.write_kubeconfig(path, user=f"system:node:{node_name}"))
        if self.env is not None:
            return str(self.env.node_kubeconfig(node_name))
        with self._lock:
            if self._asked and self.no_node_credentials is not None:
                return self.kubeconfig
            self._asked = True
            try:
                return self._mint(node_name)
            except NoNodeCredentials as exc:
                self.no_node_credentials = str(exc)
                return self.kubeconfig

    def _mint(self, node_name: str) -> str:
        from kubernetes import config

        assert self.workdir is not None
        dest = self.workdir / f"{node_name}-{secrets.token_hex(2)}.kubeconfig"
        api = config.new_client_from_config(config_file=self.kubeconfig)  # type: ignore[no-untyped-call]
        try:
            path = mint_node_kubeconfig(api, self.kubeconfig, node_name, dest)
        finally:
            api.close()
        check_node_authorizer(str(path), node_name)
        return str(path)

    def kubelet_client_trust(self) -> str | None:
        """A CA file the tests' nodes trust as their client CA (the kubelet's --client-ca-file)
        so the API server's kubelet-client certificate verifies; None: the agents' default,
        the kubeconfig's CA (the fake's; our control plane's client CA, unless it has one of its
        own). On a cluster of the user's with `kubelet_client_ca`: that and the kubeconfig's CA
        (a file in `workdir`)."""
        if self.fake is not None:
            return None
        if self.env is not None:
            own = self.env.client_ca[0]
            return None if own == self.env.ca.pair.cert else str(own)
        if self.kubelet_client_ca is None:
            return None
        assert self.workdir is not None
        bundle = self.workdir / "kubelet-client-trust.crt"
        with self._lock:
            if not bundle.exists():
                given = Path(self.kubelet_client_ca).read_bytes()
                bundle.write_bytes(_cluster_ca(self).encode() + b"\n" + given)
        return str(bundle)

    def kubeconfig_ca(self) -> str | None:
        """The kubeconfig's CA as a file in `workdir` (None where it names none, as with
        insecure-skip-tls-verify): what the agents trust by default."""
        pem = _cluster_ca(self)
        if not pem.strip() or self.workdir is None:
            return None
        path = self.workdir / "kubeconfig-ca.crt"
        with self._lock:
            path.write_text(pem)
        return str(path)

    def probed(self, what: str) -> str | None:
        """What an earlier `probe(what, ...)` found lacking (None: nothing, or not asked)."""
        with self._lock:
            return self._probes.get(what)

    def probe(self, what: str, ask: Callable[[], str | None]) -> str | None:
        """`ask()` once per session: what the server lacks for `what` (None: it has it)."""
        with self._lock:
            if what not in self._probes:
                self._probes[what] = ask()
            return self._probes[what]


@dataclass
class ApiUnderTest:
    """What a test gets: clients, a fresh namespace, a unique node name, maybe the fake."""

    api: Any  # kubernetes.client.ApiClient
    core: Any  # kubernetes.client.CoreV1Api
    coordination: Any  # kubernetes.client.CoordinationV1Api
    kubeconfig: str
    fake: FakeApiServer | None
    namespace: str
    node_name: str
    session: _Session

    @property
    def node_kubeconfig(self) -> str:
        """Credentials of a kubelet for `node_name` (`system:node:<name>` on a real server)."""
        if self._node_kubeconfig is None:
            self._node_kubeconfig = self.session.node_kubeconfig(self.node_name)
        return self._node_kubeconfig

    _node_kubeconfig: str | None = None

    @property
    def is_fake(self) -> bool:
        """True when the API server is the in-process fake."""
        return self.fake is not None

    def require_fake(self, reason: str) -> FakeApiServer:
        """Skip on a real cluster (fault hooks exist only in the fake); returns the fake."""
        if self.fake is None:
            pytest.skip(f"needs the fake API server: {reason}")
        return self.fake

    def require_node_credentials(self) -> str:
        """A kubelet's kubeconfig for `node_name`; skips, saying why, where the cluster gives
        none (its CSR signer or Node authorizer is missing)."""
        path = self.node_kubeconfig
        if path == self.kubeconfig and not self.is_fake:
            pytest.skip(f"needs node credentials: {self.session.no_node_credentials}")
        return path

    def require_csr_signer(self) -> None:
        """Skip where the server signs no kubelet client CSRs (asked once per session)."""
        if self.fake is not None:
            pytest.skip("needs a CSR signer: the fake API server signs nothing")
        lacking = self.session.probe(
            "csr-signer", lambda: ask_signer(self.api, self.kubeconfig, self.node_name)
        )
        if lacking:
            pytest.skip(lacking)

    def require_namespace_defaults(self) -> None:
        """Skip where the cluster's controllers do not fill new namespaces (the suite then
        makes `default` and `kube-root-ca.crt` itself), saying which controller is missing."""
        if self.fake is not None:
            return
        for what in (SERVICEACCOUNT_CONTROLLER, ROOT_CA_PUBLISHER):
            lacking = self.session.probed(f"controller {what}")
            if lacking:
                pytest.skip(lacking)

    def require_kubelet_client_ca(self) -> str | None:
        """The client CA file for a node whose API the API server reaches (logs, exec, attach,
        port-forward: see `_Session.kubelet_client_trust`); on a cluster of the user's, skips
        where it does not verify the API server's kubelet-client certificate (asked once per
        session), naming KUBELET_SIM_TEST_KUBELET_CLIENT_CA."""
        trust = self.session.kubelet_client_trust()
        if self.fake is None and self.session.env is None:
            checked = trust or self.session.kubeconfig_ca()
            lacking = self.session.probe(
                "kubelet-client CA",
                lambda: ask_kubelet_client_ca(self.api, checked, deadline_scale(), self.namespace),
            )
            if lacking:
                pytest.skip(lacking)
        return trust

    def service_account_admission(self) -> str | None:
        """What the API server lacks for ServiceAccount admission (None: it has it, as the fake
        and the tests' own control plane do); asked once per session with a dry-run pod."""
        if self.fake is not None or self.session.env is not None:
            return None
        return self.session.probe(
            "ServiceAccount admission",
            lambda: ask_service_account_admission(self.api, self.namespace),
        )

    def require_service_account_admission(self) -> None:
        """Skip where the API server runs without its ServiceAccount admission plugin (a
        cluster of the user's may): no `default` ServiceAccount, no kube-api-access volume."""
        lacking = self.service_account_admission()
        if lacking:
            pytest.skip(lacking)

    def require_scheduler(self) -> None:
        """Skip where no scheduler places pods: the fake, or a cluster without one (asked once
        per session with a pod that fits no node, which a scheduler marks Unschedulable)."""
        if self.fake is not None:
            pytest.skip("needs a scheduler: the fake API server schedules nothing")
        lacking = self.session.probe(
            "scheduler", lambda: ask_scheduler(self.api, self.namespace, deadline_scale())
        )
        if lacking:
            pytest.skip(lacking)

    def require_controller(self, kind: str) -> None:
        """Skip where no controller-manager acts on `kind` (Deployment or DaemonSet): the fake,
        or a cluster where a probe object gets no status within the deadline."""
        if self.fake is not None:
            pytest.skip(f"needs a {kind} controller: the fake API server runs no controllers")
        lacking = self.session.probe(
            kind, lambda: ask_controller(self.api, self.namespace, kind, deadline_scale())
        )
        if lacking:
            pytest.skip(lacking)


@pytest.fixture(scope="session")
def cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Session]:
    """The real cluster named by the environment, a control plane we start, or one fake."""
    if api_mode() == "real":
        yield from _real_session(tmp_path_factory.mktemp("nodes"))
        return
    fake = FakeApiServer().start()
    path = fake.write_kubeconfig(tmp_path_factory.mktemp("fakeapi") / "kubeconfig")
    try:
        yield _Session(str(path), fake)
    finally:
        fake.stop()


def _real_session(workdir: Path) -> Iterator[_Session]:
    given = os.environ.get(KUBECONFIG_ENV)
    if given:
        client_ca = os.environ.get(KUBELET_CLIENT_CA_ENV) or None  # a file: pytest_configure
        yield _Session(given, None, workdir=workdir, kubelet_client_ca=client_ca)
        return
    try:
        binaries = find_binaries()
    except KubeEnvError as exc:
        pytest.skip(f"no real API server: {exc}")
    env = KubeEnv(binaries, cluster_signing_duration=CSR_CERTIFICATE_SECONDS).start()
    try:
        yield _Session(str(env.admin_kubeconfig), None, env)
    finally:
        env.stop()


@pytest.fixture
def fake_api(cluster_session: _Session) -> FakeApiServer:
    """The session's fake API server (skips on a real cluster)."""
    if cluster_session.fake is None:
        pytest.skip("needs the fake API server")
    return cluster_session.fake


SERVICEACCOUNT_CONTROLLER = "serviceaccount"
ROOT_CA_PUBLISHER = "root-ca-cert-publisher"


def _namespace_defaults(api: Any, session: _Session, namespace: str) -> None:
    """What a cluster's controllers put in every new namespace, before a test uses it: the
    ServiceAccount `default` (pods are refused without it) and the ConfigMap `kube-root-ca.crt`
    (every automounted token's volume reads it). Where the cluster has no controller for one
    (asked once per session: none within the probe's deadline), the suite makes it, as a
    control plane without kube-controller-manager needs; `ApiUnderTest.require_namespace_defaults`
    skips a test of the controllers themselves, saying which one is missing."""
    from kubelet_sim.kube.rest import ApiError, request_json

    base = f"/api/v1/namespaces/{namespace}"
    wanted = {
        SERVICEACCOUNT_CONTROLLER: (
            f"{base}/serviceaccounts",
            {"metadata": {"name": "default"}},
            "ServiceAccount default",
        ),
        ROOT_CA_PUBLISHER: (
            f"{base}/configmaps",
            {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": _cluster_ca(session)}},
            "ConfigMap kube-root-ca.crt",
        ),
    }

    def exists(what: str) -> bool:
        path, body, _ = wanted[what]
        try:
            request_json(api, "GET", f"{path}/{body['metadata']['name']}")
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    no_controller = session.env is not None and "kube-controller-manager" not in (
        session.env.components
    )

    def ask(what: str, described: str) -> str | None:
        if no_controller:
            return f"the test control plane runs no kube-controller-manager (no {what} controller)"
        if poll(lambda: exists(what), PROBE_DEADLINE * deadline_scale()):
            return None
        return (
            f"the cluster has no {what} controller: no {described} in a new namespace within "
            f"{PROBE_DEADLINE:.0f} s"
        )

    for what, (path, body, described) in wanted.items():
        lacking = session.probe(f"controller {what}", lambda: ask(what, described))  # noqa: B023
        if lacking is None:
            wait_for(lambda what=what: exists(what), 30, f"{described} in {namespace}")
            continue
        try:
            request_json(api, "POST", path, body)
        except ApiError as exc:
            if not exc.already_exists:
                raise


def _cluster_ca(session: _Session) -> str:
    """The CA certificate(s) the session's kubeconfig trusts (none where it skips TLS
    verification): what kube-root-ca.crt holds where no controller publishes it."""
    import base64

    data = kubeconfig_cluster(session.kubeconfig).get("certificate-authority-data", "")
    return base64.b64decode(data).decode()


def _cleanup(core: Any, session: _Session, namespace: str, node_name: str) -> None:
    from kubernetes.client import ApiException, V1DeleteOptions

    # No kubelet is left to finish graceful deletions: force them, or the namespace controller
    # (the real one and the fake's) waits for them forever.
    for pod in core.list_namespaced_pod(namespace).items:
        try:
            core.delete_namespaced_pod(
                pod.metadata.name, namespace, body=V1DeleteOptions(grace_period_seconds=0)
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
    for delete, args in ((core.delete_namespace, (namespace,)), (core.delete_node, (node_name,))):
        try:
            delete(*args, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def cluster(cluster_session: _Session) -> Iterator[ApiUnderTest]:
    """A fresh namespace `ks-test-<random>` and node name `ks-node-<random>` per test."""
    with new_cluster(cluster_session) as c:
        yield c


def control_plane_session(env: KubeEnv) -> _Session:
    """A session on a control plane a test started itself (not the suite's)."""
    return _Session(str(env.admin_kubeconfig), None, env)


@contextlib.contextmanager
def new_cluster(cluster_session: _Session, node_name: str | None = None) -> Iterator[ApiUnderTest]:
    """What the `cluster` fixture gives, on any session; `node_name` instead of a random one."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=cluster_session.kubeconfig)  # type: ignore[no-untyped-call]
    core = client.CoreV1Api(api)
    suffix = secrets.token_hex(4)
    namespace, node_name = f"ks-test-{suffix}", node_name or f"ks-node-{suffix}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    if cluster_session.fake is None:
        _namespace_defaults(api, cluster_session, namespace)
    c = ApiUnderTest(
        api=api,
        core=core,
        coordination=client.CoordinationV1Api(api),
        kubeconfig=cluster_session.kubeconfig,
        fake=cluster_session.fake,
        namespace=namespace,
        node_name=node_name,
        session=cluster_session,
    )
    try:
        yield c
    finally:
        if cluster_session.fake is not None:
            cluster_session.fake.reset_faults()
        try:
            _cleanup(core, cluster_session, namespace, node_name)
        finally:
            api.close()


class EventStream:
    """Reads a watch response on a thread so tests can wait for events with a deadline."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in watch_lines(self.response):
                self.events.put(json.loads(line))
        except Exception as exc:  # a cut connection: the test looks at `ended`/`error`
            self.error = exc
        finally:
            self.ended.set()
            self.events.put(None)

    def next(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next event; fails the test if none comes in time or the stream ended."""
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no watch event within {timeout}s (seen: {self._summary()})")
        if event is None:
            self.events.put(None)
            pytest.fail(f"watch stream ended (seen: {self._summary()}, error: {self.error!r})")
        self.seen.append(event)
        return event

    def wait(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0
    ) -> dict[str, Any]:
        """Skip events until one satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.next(max(deadline - time.monotonic(), 0.01))
            if predicate(event):
                return event

    def take(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The next n events."""
        return [self.next(timeout) for _ in range(n)]

    def assert_ends(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Wait for the stream to end; returns the events still unread."""
        if not self.ended.wait(timeout):
            pytest.fail(f"watch stream still open after {timeout}s")
        rest = []
        while (event := self.events.get(timeout=1)) is not None:
            rest.append(event)
        self.events.put(None)
        return rest

    def _summary(self) -> str:
        return ", ".join(
            f"{e['type']} {e['object'].get('metadata', {}).get('name', '')}"
            for e in self.seen[-10:]
        )

    def close(self) -> None:
        """Cut the connection (a blocked reader would deadlock a plain close), then close."""
        close_watch(self.response, self.ended)


def open_watch(list_call: Callable[..., Any], *args: Any, **kwargs: Any) -> EventStream:
    """Start a watch through a client list call, e.g. open_watch(core.list_namespaced_pod, ns).

    From resourceVersion "0" (the current objects as ADDED, then what follows), not from an
    unset one: a v1.34 server first waits for its watch cache to be as fresh as etcd, which
    Debian's etcd 3.4 cannot tell it on a quiet resource (no progress notifications): the
    watch then ends after about 3 s with an ERROR event (504, "Too large resource version")."""
    kwargs.setdefault("_request_timeout", 30)
    kwargs.setdefault("resource_version", "0")
    response = list_call(*args, watch=True, _preload_content=False, **kwargs)
    return EventStream(response)


# The life of what the session's controller-manager signs for a CSR: rotation comes within a
# minute (at 70-84 % of the life, counted from 5 min back, kcm's backdate), and never at once.
CSR_CERTIFICATE_SECONDS = 130

# A scheduler name no scheduler has: a pod that names it stays unbound on a real cluster (whose
# default-scheduler would otherwise bind it to any node that fits, a node of the cluster's own
# among them) until the test binds it or never.
NO_SCHEDULER = "kubelet-sim-test"


def pod_body(name: str, image: str = "busybox:1.36", **spec: Any) -> dict[str, Any]:
    """A minimal pod manifest (tests/manifests.py); extra keyword arguments go into `spec`."""
    main = {"name": "main", "image": image, "command": ["sleep", "3600"]}
    containers = spec.pop("containers", [main])  # a test's own containers replace it
    return pod_manifest(name, containers, **spec)
