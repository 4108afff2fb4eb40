"""Whether a comparison can be fair, asked before anything runs: `kubelet-sim compare` refuses one
that cannot be with a one-line reason (exit code 2).

Run against a reference node that lacked the default image, 15 of 18 scenarios came out as our
node's differences where the reference had only failed to pull. So before any pod is made:
- both nodes are Ready (a node that is not runs nothing, or runs late);
- the reference kubelet is within the version skew policy of the API server (never newer; at
  most 3 minors older from v1.28, 2 before): an unsupported pair shows neither kubelet's truth;
- every image the scenarios run is on both nodes, as each Node's `status.images` lists it (the
  kubelet's and ours: Docker's images). Images under `.invalid` (RFC 6761: never resolvable)
  are exempt: the shipped bad-image scenarios use one to fail on purpose. A node that lists the
  most images a kubelet reports (50) may have more, so it is not refused for one it omits.

What cannot be told (a server or kubelet built without a version, a Node not found: the runner
says so) is not refused. `refusal` is pure; `why_unfair` reads the two Nodes and /version.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubelet_sim.compare.scenarios import Scenario, pod_for
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.versions import minor_of
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.rest import read_json, request_json

MAX_REPORTED_IMAGES = 50  # the kubelet's --node-status-max-images default
NEVER_RESOLVED = ".invalid"
DOCKER_HUB = "docker.io"
_CONTAINER_LISTS = ("initContainers", "containers")


@dataclass(frozen=True)
class NodeFacts:
    """What a Node object tells about its fitness for a comparison."""

    name: str
    ready: bool
    kubelet_version: str
    images: frozenset[str]  # every name it lists, normalised
    images_capped: bool  # it lists as many as a kubelet reports: others may be there too

    @classmethod
    def of(cls, node: Json) -> NodeFacts:
        status: Json = node.get("status") or {}
        conditions = status.get("conditions") or []
        listed = status.get("images") or []
        return cls(
            name=str((node.get("metadata") or {}).get("name") or ""),
            ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
            kubelet_version=str((status.get("nodeInfo") or {}).get("kubeletVersion") or ""),
            images=frozenset(normalised(n) for i in listed for n in i.get("names") or []),
            images_capped=len(listed) >= MAX_REPORTED_IMAGES,
        )


def normalised(reference: str) -> str:
    """An image reference as the runtimes list it: `busybox` is `docker.io/library/busybox:latest`
    (the distribution library's ParseNormalizedNamed and TagNameOnly)."""
    name, _, digest = reference.partition("@")
    first, slash, rest = name.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        first, rest = DOCKER_HUB, name
    if first == "index.docker.io":
        first = DOCKER_HUB
    if first == DOCKER_HUB and "/" not in rest:
        rest = f"library/{rest}"
    if digest:
        return f"{first}/{rest}@{digest}"
    last = rest.rsplit("/", 1)[-1]
    return f"{first}/{rest}" if ":" in last else f"{first}/{rest}:latest"


def required_images(scenarios: Iterable[Scenario], image: str) -> list[str]:
    """The images the scenarios' pods run, `{image}` replaced, in order and once each."""
    seen: list[str] = []
    for scenario in scenarios:
        spec: Json = pod_for(scenario, name=scenario.name, node="", image=image)["spec"]
        for key in _CONTAINER_LISTS:
            for container in spec.get(key) or []:
                wanted = str(container.get("image") or "")
                domain = wanted.split("/", 1)[0] if "/" in wanted else ""
                if wanted and wanted not in seen and not domain.endswith(NEVER_RESOLVED):
                    seen.append(wanted)
    return seen


def skew_problem(kubelet_version: str, server_version: str | None) -> str | None:
    """The version skew policy: a kubelet is never newer than its API server, and at most 3
    minors older (2 before v1.28)."""
    kubelet, server = minor_of(kubelet_version), minor_of(server_version)
    if kubelet is None or server is None:
        return None
    oldest = server - (3 if server >= 28 else 2)
    if kubelet > server:
        return f"newer than the API server ({server_version})"
    if kubelet < oldest:
        return f"older than the API server ({server_version}) allows (v1.{oldest} at the oldest)"
    return None


def refusal(
    ours: NodeFacts, reference: NodeFacts, server_version: str | None, images: Sequence[str]
) -> str | None:
    """Why the comparison cannot be fair, in one line; None when nothing says so."""
    for side, node in (("our node", ours), ("reference node", reference)):
        if not node.ready:
            return f"{side} {node.name} is not Ready: it would not run the scenarios as it should"
    skew = skew_problem(reference.kubelet_version, server_version)
    if skew:
        return f"the reference kubelet {reference.kubelet_version} is {skew}"
    for wanted in images:
        for side, node in (("our node", ours), ("reference node", reference)):
            if not node.images_capped and normalised(wanted) not in node.images:
                return (
                    f"image {wanted} is not on {side} {node.name} (not in its status.images):"
                    " put it on both nodes, or give --image one that is"
                )
    return None


def why_unfair(
    kube: KubeConnection,
    node: str,
    reference_node: str,
    scenarios: Sequence[Scenario],
    *,
    image: str,
) -> str | None:
    """`refusal` for the cluster's two Nodes and its API server, read now."""
    found: list[NodeFacts] = []
    for name in (node, reference_node):
        node_object = read_json(kube.api, f"/api/v1/nodes/{name}")
        if node_object is None:
            return None  # the runner's error says which node is missing
        found.append(NodeFacts.of(node_object))
    version = request_json(kube.api, "GET", "/version").get("gitVersion")
    ours, reference = found
    return refusal(ours, reference, version, required_images(scenarios, image))
