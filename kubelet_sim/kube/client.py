"""Finding and reaching the API server: kubeconfig or in-cluster config, then /version."""

from __future__ import annotations

import base64
import os
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubelet_sim import __version__
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff

USER_AGENT = f"kubelet-sim/{__version__}"


class KubeConfigError(Exception):
    """No usable client configuration: the agent cannot even try to reach an API server."""


@dataclass(frozen=True)
class KubeConnection:
    """An API client plus where its configuration came from (for logs and errors)."""

    api: client.ApiClient
    host: str
    source: str
    # The kubelet's HeartbeatClient: Lease renewals and node status on a client of their own,
    # so that they never queue behind pods' requests for a pooled connection (at 5,000 nodes
    # and 100 pods starting, one pool's lock alone made renewals a minute late).
    heartbeat: client.ApiClient | None = None

    @property
    def heartbeat_api(self) -> client.ApiClient:
        return self.heartbeat or self.api

    @property
    def ca_file(self) -> str | None:
        """The cluster CA's file (inline kubeconfig data is written to one by the client): on
        kind/kubeadm it signs the API server's client certificate for kubelets."""
        path = self.api.configuration.ssl_ca_cert
        return str(path) if path else None

    def cluster_entry(self) -> dict[str, Any]:
        """This connection's server and CA as a kubeconfig's `cluster` (CA data inline), for
        a kubeconfig of other credentials on the same server."""
        configuration = self.api.configuration
        cluster: dict[str, Any] = {"server": configuration.host}
        if configuration.ssl_ca_cert:
            ca = Path(configuration.ssl_ca_cert).read_bytes()
            cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
        if not configuration.verify_ssl:
            cluster["insecure-skip-tls-verify"] = True
        return cluster

    def _clients(self) -> list[client.ApiClient]:
        return [self.api] if self.heartbeat is None else [self.api, self.heartbeat]

    def drop_connections(self) -> None:
        """Close the pooled connections: the next requests open new ones, with the client
        certificate the kubeconfig's file holds now (after a rotation)."""
        for api in self._clients():
            api.rest_client.pool_manager.clear()

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Requests so far by (method, code), when the client counts them (connect's does)."""
        counts: Counter[tuple[str, str]] = Counter()
        for api in self._clients():
            if isinstance(api, CountingApiClient):
                counts.update(api.request_counts())
        return dict(counts)


def connect(
    kubeconfig: str | None = None, context: str | None = None, *, pool_size: int | None = None
) -> KubeConnection:
    """Build a client the way kubectl resolves config: flag, $KUBECONFIG, ~/.kube/config, pod.

    `pool_size`: connections kept per host (several nodes in one process share one pool).
    """
    path = _kubeconfig_path(kubeconfig)
    if path is not None:
        configuration = client.Configuration()
        try:
            config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration
            )
        except (config.ConfigException, OSError, ValueError, TypeError) as exc:
            raise KubeConfigError(f"cannot use kubeconfig {path}: {exc}") from exc
        source = f"kubeconfig {path}" + (f" (context {context})" if context else "")
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context:
            raise KubeConfigError("--context needs a kubeconfig; none was found")
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as exc:
            raise KubeConfigError(f"cannot use in-cluster config: {exc}") from exc
        source = "in-cluster service account"
    else:
        raise KubeConfigError(
            "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config,"
            " or run inside a pod"
        )
    # Our loops own retries and backoff; urllib3's silent retries would only hide failures.
    configuration.retries = False
    if pool_size is not None:
        configuration.connection_pool_maxsize = max(
            pool_size, configuration.connection_pool_maxsize
        )
    if not configuration.verify_ssl:
        _warn_insecure_once(source)
    api = CountingApiClient(configuration=configuration)
    api.user_agent = USER_AGENT
    heartbeat = CountingApiClient(configuration=configuration)  # its own connection pool
    heartbeat.user_agent = USER_AGENT
    return KubeConnection(api, api.configuration.host, source, heartbeat)


class CountingApiClient(client.ApiClient):
    """The client, counting its requests by method and answer code: client-go's
    rest_client_requests_total, which the kubelet's /metrics carries."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: Counter[tuple[str, str]] = Counter()
        self._count_lock = threading.Lock()

    def call_api(self, method: str, *args: Any, **kwargs: Any) -> Any:
        code = "<error>"  # client-go's label when no answer came
        try:
            response = super().call_api(method, *args, **kwargs)
            code = str(getattr(response, "status", "") or code)
            return response
        except ApiException as exc:
            code = str(exc.status or code)
            raise
        finally:
            with self._count_lock:
                self.requests[(method.upper(), code)] += 1

    def request_counts(self) -> dict[tuple[str, str], int]:
        with self._count_lock:
            return dict(self.requests)


def _warn_insecure_once(source: str) -> None:
    """One structured warning instead of urllib3's InsecureRequestWarning on every request."""
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    get_logger(__name__).warning(
        "TLS verification of the API server is off (insecure-skip-tls-verify)", source=source
    )


def _kubeconfig_path(explicit: str | None) -> str | None:
    if explicit:
        if not Path(explicit).expanduser().is_file():
            raise KubeConfigError(f"kubeconfig {explicit} does not exist")
        return str(Path(explicit).expanduser())
    for candidate in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if candidate and Path(candidate).expanduser().is_file():
            return str(Path(candidate).expanduser())
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


def wait_for_api_server(conn: KubeConnection, stop: threading.Event) -> str | None:
    """Block until /version answers (returning the server's gitVersion) or `stop` is set.

    The agent may start before the control plane (a node booting with the cluster), so an
    unreachable server is a reason to retry and say so, not to exit.
    """
    log = get_logger(__name__, server=conn.host)
    backoff = Backoff(initial=0.8, cap=30.0)
    while not stop.is_set():
        try:
            info = request_json(conn.api, "GET", "/version", timeout=(5, 10))
        except Exception as exc:  # any transport or HTTP failure means: not reachable yet
            delay = backoff.next_delay()
            log.warning(
                "API server unreachable; retrying",
                error=_one_line(exc),
                retry_in_seconds=round(delay, 1),
            )
            stop.wait(delay)
            continue
        version = str(info.get("gitVersion") or "unknown")
        log.info("API server reachable", server_version=version, config_source=conn.source)
        return version
    return None


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, client.ApiException | ApiError):
        return f"HTTP {exc.status} {exc.reason}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
