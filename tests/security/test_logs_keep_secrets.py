"""Logs never hold exec commands' arguments, env values or secret data, at any level.

The agent runs here with the CLI's own logging at debug (structlog and the libraries it uses:
urllib3, docker, kubernetes) into a buffer, runs a pod whose exec hook, exec probe, env and
Secret carry marked values, and is asked for an exec over its API port with a marked argument
(the request log once held the whole query); none of the marks may reach the buffer.
"""

from __future__ import annotations

import base64
import io
import logging
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from kubelet_sim.logs import configure_logging
from kubelet_sim.server.settings import ServerSettings
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest
from tests.docker_env import DockerEnv
from tests.pods import container, make_pod, running_ready, wait_status

MARKS = {
    "hook": "hook-arg-s3cr3t-7f1d",
    "probe": "probe-arg-s3cr3t-2b9c",
    "env": "env-value-s3cr3t-c4e0",
    "secret": "secret-data-s3cr3t-9a3e",
    "exec": "exec-arg-s3cr3t-55d1",
}


@pytest.fixture
def debug_log() -> Iterator[io.StringIO]:
    """The CLI's logging at debug, into a buffer; what was configured before comes back."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    libraries = {n: logging.getLogger(n).level for n in ("urllib3", "kubernetes", "docker")}
    saved = structlog.get_config()
    buffer = io.StringIO()
    configure_logging("json", "debug", buffer)
    structlog.configure(cache_logger_on_first_use=False)  # no logger keeps this buffer
    try:
        yield buffer
    finally:
        structlog.configure(**saved)
        root.handlers, root.level = saved_handlers, saved_level
        for name, level in libraries.items():
            logging.getLogger(name).setLevel(level)


def test_no_argument_env_value_or_secret_reaches_the_log(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path, debug_log: io.StringIO
) -> None:
    secret = base64.b64encode(MARKS["secret"].encode()).decode()
    cluster.core.create_namespaced_secret(
        cluster.namespace, {"metadata": {"name": "creds"}, "data": {"password": secret}}
    )
    settings = ServerSettings(address="127.0.0.1", port=0)
    running = start_agent(cluster, docker_env, tmp_path / "root", server=settings)
    try:
        server = running.agent.server
        assert server is not None
        hook = {"exec": {"command": ["sh", "-c", f"echo {MARKS['hook']} > /dev/null"]}}
        probe = {"exec": {"command": ["sh", "-c", f"test {MARKS['probe']}"]}, "periodSeconds": 1}
        make_pod(
            cluster,
            "secretive",
            container(
                lifecycle={"postStart": hook},
                readinessProbe=probe,
                env=[
                    {"name": "PLAIN", "value": MARKS["env"]},
                    {
                        "name": "PASSWORD",
                        "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}},
                    },
                ],
                volumeMounts=[{"name": "creds", "mountPath": "/creds"}],
            ),
            volumes=[{"name": "creds", "secret": {"secretName": "creds"}}],
        )
        wait_status(cluster, "secretive", running_ready, 60, "Running and Ready")
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        url = (
            f"https://127.0.0.1:{server.port}/exec/{cluster.namespace}/secretive/c"
            f"?command=sh&command=-c&command={MARKS['exec']}&stdout=1"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url), context=context, timeout=30)
        assert refused.value.code == 401
    finally:
        running.stop()
    text = debug_log.getvalue()
    for what, mark in MARKS.items():
        assert mark not in text, f"the {what} mark is in the log"
    assert '"level": "debug"' in text, "the log was at debug"
    assert '"path": "/exec/' in text, "the exec request was logged, without its query"
