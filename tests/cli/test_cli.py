"""`kubelet-sim` as a user runs it: it starts, registers, logs JSON and stops on SIGTERM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.agent_process import AgentProcess, run_command, running_agent
from tests.cluster import ApiUnderTest, wait_for

pytestmark = pytest.mark.docker


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return run_command(*args, env={**os.environ, **(env or {})})


def _wait_ready(cluster: ApiUnderTest, agent: AgentProcess, timeout: float = 30) -> None:
    try:
        wait_for(lambda: _node_ready(cluster), timeout, "the Node to be Ready")
    except BaseException:
        print("\n".join(agent.lines[-30:]))
        raise


def _node_ready(cluster: ApiUnderTest) -> bool:
    try:
        node = cluster.core.read_node(cluster.node_name)
    except Exception:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_agent_registers_logs_json_and_stops_cleanly_on_sigterm(
    cluster: ApiUnderTest, docker_env: object
) -> None:
    with running_agent(cluster, "--node-labels", "kubelet-sim.io/demo=yes") as agent:
        _wait_ready(cluster, agent)
        node = cluster.core.read_node(cluster.node_name)
        assert node.metadata.labels["kubelet-sim.io/demo"] == "yes"
        assert _own_taints(cluster) == [("kubelet-sim.io/virtual", "true", "NoSchedule")], (
            "a virtual node keeps ordinary workloads off unless told otherwise"
        )
        cluster.core.create_namespaced_pod(
            cluster.namespace,
            {
                "metadata": {"name": "hello"},
                "spec": {
                    "nodeName": cluster.node_name,
                    "containers": [{"name": "c", "image": "kubelet-sim.local/busybox:test"}],
                },
            },
        )
        # A cluster's DaemonSets that tolerate every taint (kind's kindnet) bind pods here too.
        seen = agent.wait_for_log(
            lambda r: (
                r.get("event") == "pod bound to this node"
                and r.get("pod") == f"{cluster.namespace}/hello"
            ),
            10,
            "the pod to be seen",
        )
        assert seen["node"] == cluster.node_name
        code = agent.terminate()  # fails if the agent is still there after its timeout
        assert code == 0, "\n".join(agent.lines[-8:])
        events = [r["event"] for r in agent.records()]
        # The last word is "stopped", or, on a machine slow enough that a thread is still in a
        # call when the one shutdown deadline passes, the exit past it that cli.py says it does.
        last = events[:-1] if events[-1] == "exiting with calls in flight" else events
        assert last[-1] == "stopped", agent.records()[-1]
        assert all({"timestamp", "level", "event"} <= set(r) for r in agent.records())
    assert cluster.core.read_node(cluster.node_name).metadata.name == cluster.node_name, (
        "the Node stays after a normal exit, as the kubelet's does"
    )


def _own_taints(cluster: ApiUnderTest) -> list[tuple[str, str | None, str]]:
    """The Node's taints but those a real cluster's node lifecycle controller adds itself."""
    node = cluster.core.read_node(cluster.node_name)
    return [
        (t.key, t.value, t.effect)
        for t in node.spec.taints or []
        if not t.key.startswith("node.kubernetes.io/")
    ]


@pytest.mark.parametrize(
    ("flag", "taints"),
    [("", []), ("example.com/gpu=yes:NoExecute", [("example.com/gpu", "yes", "NoExecute")])],
)
def test_register_with_taints_replaces_the_default(
    cluster: ApiUnderTest, docker_env: object, flag: str, taints: list[tuple[str, str, str]]
) -> None:
    """NodeRestriction lets a kubelet set its taints when it creates its Node; none is kept
    from the default, and an explicit empty value registers none."""
    with running_agent(cluster, "--register-with-taints", flag) as agent:
        _wait_ready(cluster, agent)
        assert _own_taints(cluster) == taints


def test_delete_node_on_exit(cluster: ApiUnderTest, docker_env: object) -> None:
    """With credentials that may delete Nodes (a kubelet's may not; see test_node_lifecycle)."""
    with running_agent(cluster, "--delete-node-on-exit", kubeconfig=cluster.kubeconfig) as agent:
        _wait_ready(cluster, agent)
        assert agent.terminate() == 0, "\n".join(agent.lines)
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as gone:
        cluster.core.read_node(cluster.node_name)
    assert gone.value.status == 404


def test_invalid_node_name_is_one_clear_line() -> None:
    result = _run("--node-name", "Not_Valid")
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "invalid node name 'Not_Valid'" in result.stderr


def test_missing_kubeconfig_is_one_clear_line(tmp_path: Path) -> None:
    result = _run(
        "--node-name",
        "n1",
        env={"HOME": str(tmp_path), "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""},
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "kubelet-sim: error: no kubeconfig found: pass --kubeconfig, set KUBECONFIG,"
        " create ~/.kube/config, or run inside a pod"
    )


def test_unreachable_docker_is_one_clear_line(cluster: ApiUnderTest) -> None:
    result = _run(
        "--node-name", "n1", "--kubeconfig", cluster.kubeconfig,
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )  # fmt: skip
    assert result.returncode == 1
    *before, last = result.stderr.strip().splitlines()
    assert last.startswith("kubelet-sim: error: Docker not reachable")
    # Before it only log records (a kubeconfig with insecure-skip-tls-verify is warned of at
    # start), no traceback.
    assert all(_log_record(line) for line in before), result.stderr


def _log_record(line: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "event" in record


def test_options_come_from_environment_variables(tmp_path: Path) -> None:
    result = _run(env={"KUBELET_SIM_NODE_NAME": "Bad_Name"})
    assert "invalid node name 'Bad_Name'" in result.stderr


def test_unreachable_api_server_is_retried_and_logged(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    from tests.agent_process import AgentProcess

    agent = AgentProcess(
        ["--node-name", "n1", "--kubeconfig", str(kubeconfig), "--log-format", "json"]
    )
    retry = agent.wait_for_log(
        lambda r: r.get("event") == "API server unreachable; retrying", 15, "a retry log line"
    )
    assert retry["retry_in_seconds"] > 0
    assert agent.terminate() == 0


def test_insecure_kubeconfig_warns_once_not_per_request(
    cluster: ApiUnderTest, docker_env: object, tmp_path: Path
) -> None:
    import yaml

    # JSON (ours) or YAML (a cluster's own kubeconfig, where it gives no node credentials)
    config = yaml.safe_load(Path(cluster.node_kubeconfig).read_text())
    server = config["clusters"][0]["cluster"]
    if not server["server"].startswith("https://"):
        pytest.skip("needs an API server that speaks TLS (the fake speaks plain HTTP)")
    server.pop("certificate-authority-data", None)
    server.pop("certificate-authority", None)
    server["insecure-skip-tls-verify"] = True
    insecure = tmp_path / "insecure.kubeconfig"
    insecure.write_text(json.dumps(config))
    with running_agent(cluster, kubeconfig=str(insecure)) as agent:
        _wait_ready(cluster, agent)
        assert agent.terminate() == 0
    assert not [line for line in agent.lines if "InsecureRequestWarning" in line]
    warned = [r for r in agent.records() if "TLS verification" in r.get("event", "")]
    assert len(warned) == 1, warned


def test_container_log_rotation_flags_reach_docker(cluster: ApiUnderTest, docker_env: Any) -> None:
    from tests.pods import make_pod, running_ready, wait_status

    flags = ("--container-log-max-size", "1Mi", "--container-log-max-files", "3")
    with running_agent(cluster, *flags):
        pod = make_pod(cluster, "logs")
        wait_status(cluster, "logs", running_ready, 60, "Running and Ready")
        listed = docker_env.client.api.containers(
            filters={"label": [f"io.kubernetes.pod.uid={pod['metadata']['uid']}"]}
        )
        assert len(listed) == 2, "the sandbox and the app container"
        for container in listed:
            host = docker_env.client.api.inspect_container(container["Id"])["HostConfig"]
            assert host["LogConfig"] == {
                "Type": "json-file",
                "Config": {"max-size": "1m", "max-file": "3"},
            }


def test_too_few_log_files_is_one_clear_line(cluster: ApiUnderTest) -> None:
    result = _run("--node-name", "n1", "--kubeconfig", cluster.kubeconfig,
                  "--container-log-max-files", "1")  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "kubelet-sim: error: --container-log-max-files (1) must be greater than 1"
    )
