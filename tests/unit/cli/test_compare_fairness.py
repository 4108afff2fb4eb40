"""`kubelet-sim compare` refuses a comparison that cannot be fair: each refusal, pure."""

from __future__ import annotations

import pytest

from kubelet_sim.compare.fairness import (
    MAX_REPORTED_IMAGES,
    NodeFacts,
    normalised,
    refusal,
    required_images,
    skew_problem,
)
from kubelet_sim.compare.scenarios import builtin_scenarios, parse_scenario
from kubelet_sim.formats.jsontypes import Json

BUSYBOX = "kubelet-sim.local/busybox:test"
SERVER = "v1.34.9"


def node(
    name: str,
    *,
    ready: str = "True",
    kubelet: str = "v1.34.9",
    images: list[list[str]] | None = None,
) -> NodeFacts:
    listed = [{"names": names, "sizeBytes": 1} for names in (images or [[BUSYBOX]])]
    body: Json = {
        "metadata": {"name": name},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready},
            ],
            "nodeInfo": {"kubeletVersion": kubelet},
            "images": listed,
        },
    }
    return NodeFacts.of(body)


def judge(ours: NodeFacts, reference: NodeFacts, server: str | None = SERVER) -> str | None:
    return refusal(ours, reference, server, [BUSYBOX])


def test_two_ready_nodes_with_the_image_and_a_supported_kubelet_are_fair() -> None:
    assert judge(node("n1"), node("ref")) is None


@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_a_reference_node_not_ready_is_refused(status: str) -> None:
    assert judge(node("n1"), node("ref", ready=status)) == (
        "reference node ref is not Ready: it would not run the scenarios as it should"
    )


def test_our_node_not_ready_is_refused_too() -> None:
    ours = NodeFacts.of({"metadata": {"name": "n1"}, "status": {}})  # no conditions yet
    assert judge(ours, node("ref")) == (
        "our node n1 is not Ready: it would not run the scenarios as it should"
    )


@pytest.mark.parametrize(
    ("kubelet", "server", "problem"),
    [
        ("v1.34.9", "v1.34.9", None),
        ("v1.31.4", "v1.34.9", None),  # 3 older: allowed from v1.28
        ("v1.30.0", "v1.34.9", "older than the API server (v1.34.9) allows (v1.31 at the oldest)"),
        ("v1.25.0", "v1.27.3", None),  # 2 older: allowed before v1.28
        ("v1.24.0", "v1.27.3", "older than the API server (v1.27.3) allows (v1.25 at the oldest)"),
        ("v1.34.9", "v1.24.0", "newer than the API server (v1.24.0)"),
        ("v1.34.0+kubelet-sim-0.1", "v1.34.9", None),
        ("v0.0.0-master+$Format:%H$", "v1.34.9", None),  # built without a version: no telling
        ("v1.34.9", "v0.0.0-master+$Format:%H$", None),
        ("v1.34.9", None, None),
    ],
)
def test_the_version_skew_policy(kubelet: str, server: str | None, problem: str | None) -> None:
    assert skew_problem(kubelet, server) == problem


def test_a_reference_kubelet_outside_the_skew_policy_is_refused() -> None:
    assert judge(node("n1"), node("ref", kubelet="v1.35.0")) == (
        "the reference kubelet v1.35.0 is newer than the API server (v1.34.9)"
    )


@pytest.mark.parametrize("missing_on", ["ours", "reference"])
def test_an_image_missing_on_either_node_is_refused(missing_on: str) -> None:
    bare = [["registry.k8s.io/pause:3.10"]]
    ours = node("n1", images=bare if missing_on == "ours" else None)
    reference = node("ref", images=bare if missing_on == "reference" else None)
    side = "our node n1" if missing_on == "ours" else "reference node ref"
    assert judge(ours, reference) == (
        f"image {BUSYBOX} is not on {side} (not in its status.images): put it on both nodes,"
        " or give --image one that is"
    )


def test_a_node_that_lists_the_most_images_a_kubelet_reports_may_have_more() -> None:
    full = [[f"example.com/image-{i}:1"] for i in range(MAX_REPORTED_IMAGES)]
    assert judge(node("n1"), node("ref", images=full)) is None


@pytest.mark.parametrize(
    ("written", "listed"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("index.docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36"),
        ("someone/tool", "docker.io/someone/tool:latest"),
        ("localhost/x", "localhost/x:latest"),
        ("registry:5000/a/b", "registry:5000/a/b:latest"),
        ("kubelet-sim.local/busybox:test", "kubelet-sim.local/busybox:test"),
        ("busybox@sha256:" + "a" * 64, "docker.io/library/busybox@sha256:" + "a" * 64),
    ],
)
def test_image_names_are_compared_as_runtimes_list_them(written: str, listed: str) -> None:
    assert normalised(written) == normalised(listed) == listed


def test_a_node_listing_the_image_under_another_spelling_has_it() -> None:
    reference = node("ref", images=[["docker.io/library/busybox:1.36", "busybox@sha256:0"]])
    assert (
        refusal(node("n1", images=[["busybox:1.36"]]), reference, SERVER, ["busybox:1.36"]) is None
    )


def test_the_shipped_scenarios_need_only_the_image_given() -> None:
    """The bad-image scenarios' `.invalid` image is missing on purpose."""
    assert required_images(builtin_scenarios(), BUSYBOX) == [BUSYBOX]


def test_a_users_scenario_needs_its_own_images_too() -> None:
    text = (
        "kind: Pod\nmetadata: {name: mine}\nspec:\n  initContainers:\n"
        "  - {name: i, image: 'nginx:1.27'}\n  containers:\n  - {name: c, image: '{image}'}\n"
    )
    assert required_images([parse_scenario(text, "mine.yaml")], BUSYBOX) == ["nginx:1.27", BUSYBOX]
