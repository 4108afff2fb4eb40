"""deploy/rbac.yaml against the requests the agent really makes.

On a real server the agent runs with the manifest's ServiceAccount and a pod's whole life must
go through without a refusal; on the fake, every request the agent made (the fake's request log)
must be one the manifest's ClusterRole allows, and it must grant nothing else (but the few
requests of paths one pod's life does not take, named below).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import container, get_pod, make_pod, running_ready, wait_status

pytestmark = pytest.mark.docker

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
GROUPS = {
    "leases": "coordination.k8s.io",
    "tokenreviews": "authentication.k8s.io",
    "subjectaccessreviews": "authorization.k8s.io",
    "endpointslices": "discovery.k8s.io",
}
# Granted though one pod's life does not make them, each for a path the workload skips.
NOT_IN_THE_WORKLOAD = {
    ("delete", "nodes"): "--delete-node-on-exit",
    ("get", "nodes"): "adopting an existing Node on restart",
    ("update", "nodes"): "adopting an existing Node on restart",
    ("get", "leases"): "adopting an existing Lease",
    ("update", "leases"): "renewing the Lease (every 10 s)",
    ("patch", "events"): "an event repeated",
    ("create", "tokenreviews"): "a kubelet API request with a bearer token",
    ("create", "subjectaccessreviews"): "authorizing a kubelet API request",
    # The fake refuses node users EndpointSlices, as the real Node authorizer does, so the
    # proxy's list is made (and counted) but its watch never follows there.
    ("watch", "endpointslices"): "the service proxy's watch after its list",
}


def _objects() -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(MANIFEST.read_text()) if o]


def _allowed(rules: list[dict[str, Any]], verb: str, resource: str, group: str) -> bool:
    return any(
        group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule.get("verbs", [])
        for rule in rules
    )


def _workload(cluster: ApiUnderTest) -> None:
    """A pod that uses what the agent reads and writes: a ConfigMap, a Secret, a projected
    service account token, status writes, events, and its final delete."""
    ns = cluster.namespace
    cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    cluster.core.create_namespaced_secret(
        ns, {"metadata": {"name": "sec"}, "stringData": {"s": "x"}}
    )
    env = [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]
    mounts = [{"name": "sec", "mountPath": "/sec"}]
    make_pod(
        cluster,
        "user",
        container(env=env, volumeMounts=mounts),
        volumes=[{"name": "sec", "secret": {"secretName": "sec"}}],
        automountServiceAccountToken=None,  # the default: a projected token via TokenRequest
    )
    wait_status(cluster, "user", running_ready, 30, "Running and Ready")
    cluster.core.delete_namespaced_pod("user", ns)
    wait_for(lambda: get_pod(cluster, "user") is None, 30, "the pod deleted to the end")


def _service_account_kubeconfig(cluster: ApiUnderTest, tmp_path: Path) -> str:
    """Apply the manifest with the admin, then a kubeconfig with the ServiceAccount's token."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(cluster.api)
    account = None
    for obj in _objects():
        kind = obj["kind"]
        try:
            if kind == "ServiceAccount":
                account = obj["metadata"]
                cluster.core.create_namespaced_service_account(account["namespace"], obj)
            elif kind == "ClusterRole":
                rbac.create_cluster_role(obj)
            elif kind == "ClusterRoleBinding":
                rbac.create_cluster_role_binding(obj)
        except ApiException as exc:
            if exc.status != 409:  # there from an earlier run: the same manifest
                raise
    assert account is not None
    token = cluster.core.create_namespaced_service_account_token(
        account["name"], account["namespace"], {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = json.loads(json.dumps(yaml.safe_load(Path(cluster.kubeconfig).read_text())))
    for user in config["users"]:
        user["user"] = {"token": token}
    path = tmp_path / "service-account.kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


def test_the_manifest_allows_everything_the_agent_does(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    if cluster.fake is not None:
        since = 0.0
        running = start_agent(
            cluster, docker_env, tmp_path / "root", service_proxy=True, proxy_own_credentials=True
        )
        try:
            _workload(cluster)
        finally:
            running.stop()
        user = f"system:node:{cluster.node_name}"
        made = {
            (r.verb, f"{r.resource}/{r.subresource}" if r.subresource else r.resource)
            for r in cluster.fake.requests(since=since)
            if r.user == user
            and r.user_agent.startswith("kubelet-sim/")
            and r.resource  # /version, /openapi/v2: every user may (system:discovery)
        }
        assert ("patch", "pods/status") in made, "the workload ran through the agent"
        rules = next(o for o in _objects() if o["kind"] == "ClusterRole")["rules"]
        missing = sorted(
            (verb, res)
            for verb, res in made
            if not _allowed(rules, verb, res, GROUPS.get(res.split("/")[0], ""))
        )
        assert not missing, f"deploy/rbac.yaml lacks: {missing}"
        granted = {
            (verb, res) for rule in rules for res in rule["resources"] for verb in rule["verbs"]
        }
        extra = sorted(granted - made - set(NOT_IN_THE_WORKLOAD))
        assert not extra, f"deploy/rbac.yaml grants what the agent never asks: {extra}"
        return
    from structlog.testing import capture_logs

    kubeconfig = _service_account_kubeconfig(cluster, tmp_path)
    as_account = dataclasses.replace(cluster, _node_kubeconfig=kubeconfig)
    with capture_logs() as logs:
        running = start_agent(
            as_account, docker_env, tmp_path / "root", service_proxy=True,
            proxy_own_credentials=True,
        )  # fmt: skip
        try:
            _workload(cluster)
        finally:
            running.stop()
    # Not the kubelet's own refusals at admission (a cluster's DaemonSet pods, as kind's kindnet).
    said = [e for e in logs if e.get("event") != "pod rejected"]
    # 403 as a status, not inside an id or a uid (a uid's "...403..." failed this once).
    refused = [e for e in said if _refusal(str(e))]
    assert not refused, refused


def _refusal(text: str) -> bool:
    return bool(re.search(r"(?<![\w.-])403(?![\w.-])", text)) or "forbidden" in text.lower()
