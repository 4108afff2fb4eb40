"""`kubelet-sim ui` in a real browser: headless Chromium from Debian, driven by Playwright.

Playwright drives the system's Chromium (`executable_path`), so no browser is downloaded;
`scripts/provision` installs it with apt. Where there is none, these tests skip in one line.
The page may reach nothing but loopback: every other request is aborted and fails the test.
Set KUBELET_SIM_UI_SCREENSHOTS=DIR to keep the screenshots (docs/web-view.md's come from here).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from kubelet_sim.kube.client import connect
from kubelet_sim.tools import trace
from kubelet_sim.ui import start_ui
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, deadline_scale, wait_for
from tests.docker_env import DockerEnv
from tests.manifests import pod_manifest, to_schedule_on
from tests.pods import container, get_pod, make_pod, traced

pytestmark = pytest.mark.docker

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
SCREENSHOTS_ENV = "KUBELET_SIM_UI_SCREENSHOTS"


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM) if p), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no Playwright for Python (pip install '.[test]')")
    if path is None:
        pytest.skip("no Chromium to drive (scripts/provision installs Debian's chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path)
        try:
            yield launched
        finally:
            launched.close()


class Page:
    """A tab on the view that may reach loopback only; `outside` lists what it tried else."""

    def __init__(self, browser: Any, url: str) -> None:
        self.context = browser.new_context(viewport={"width": 1500, "height": 1100})
        self.page = self.context.new_page()
        self.outside: list[str] = []
        self.page.route("**/*", self._route)
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='true']", timeout=self.ms(10))

    def _route(self, route: Any) -> None:
        host = urlsplit(route.request.url).hostname or ""
        if host in ("127.0.0.1", "localhost", "::1"):
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort()

    @staticmethod
    def ms(seconds: float) -> float:
        return seconds * deadline_scale() * 1000

    def close(self) -> None:
        self.context.close()


@contextlib.contextmanager
def _viewing(browser: Any, url: str) -> Iterator[Page]:
    page = Page(browser, url)
    try:
        yield page
    finally:
        page.close()
    assert page.outside == [], "the page asked for something beyond loopback"


def _screenshot(page: Any, name: str, selector: str | None = None) -> None:
    where = os.environ.get(SCREENSHOTS_ENV)
    if not where:
        return
    path = Path(where) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    (page.locator(selector) if selector else page).screenshot(path=str(path))


def _expected_latencies(steps: list[dict[str, Any]]) -> list[str]:
    """From `trace --output json`, the latency of each step as trace prints it: since the
    previous step with a sub-second time, `~` for an API time, nothing for no time."""
    out, previous = [], None
    for s in steps:
        if s["time"] is None:
            out.append("")
            continue
        when = datetime.fromisoformat(s["time"].replace("Z", "+00:00"))
        if not s["precise"]:
            out.append("~")
            continue
        out.append("" if previous is None else f"{(when - previous).total_seconds():.3f}s")
        previous = when
    return out


def _scheduler_available(cluster: ApiUnderTest) -> bool:
    env = cluster.session.env
    return env is not None and "kube-scheduler" in env.components


def _create_unschedulable(cluster: ApiUnderTest) -> None:
    nowhere = {
        "metadata": {"name": "nowhere"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": f"{cluster.node_name}-absent"},
            "containers": [container()],
        },
    }
    cluster.core.create_namespaced_pod(cluster.namespace, nowhere)


def _create_web(cluster: ApiUnderTest) -> None:
    """Pod `web`, through the scheduler where there is one (its part shows too), else bound."""
    if _scheduler_available(cluster):
        body = pod_manifest("web", [container()], **to_schedule_on(cluster.node_name))
        cluster.core.create_namespaced_pod(cluster.namespace, body)
    else:
        make_pod(cluster, "web")


def test_a_pod_appears_runs_shows_its_handoff_and_goes(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path, browser: Any
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root")
    ui = start_ui(connect(cluster.kubeconfig), {cluster.node_name: running.agent.runtime}, port=0)
    key = f"{cluster.namespace}/web"
    try:
        with _viewing(browser, ui.url) as view:
            page = view.page
            page.wait_for_selector(
                f"tr[data-node='{cluster.node_name}'][data-ready='true']", timeout=view.ms(30)
            )
            if _scheduler_available(cluster):  # a pod that fits nowhere: the scheduler says why
                _create_unschedulable(cluster)
            began = time.monotonic()
            _create_web(cluster)
            page.wait_for_selector(f"tr[data-pod='{key}']", timeout=view.ms(2))
            assert time.monotonic() - began < 2 * deadline_scale(), "on the page within 2 s"
            page.wait_for_selector(
                f"tr[data-pod='{key}'][data-phase='Running'][data-ready='true']",
                timeout=view.ms(60),
            )
            row = page.locator(f"tr[data-pod='{key}']")
            assert row.get_attribute("data-node") == cluster.node_name
            assert "c: running" in row.inner_text()

            page.get_by_role("button", name=f"Show the handoff timeline of pod {key}").click()
            page.wait_for_selector(
                "#timeline[data-settled='true'] [data-step='Ready written'][data-time^='20']",
                timeout=view.ms(15),
            )
            steps = traced(cluster, running.agent.runtime, "web")  # trace has it all too
            wanted = json.loads(
                trace.as_json(
                    *trace.collect(
                        connect(cluster.kubeconfig), running.agent.runtime, cluster.namespace, "web"
                    )
                )
            )["steps"]
            assert [s["step"] for s in wanted] == [s.step for s in steps]
            shown = page.eval_on_selector_all(
                "#timeline [data-step]",
                "rows => rows.map(r => ({step: r.dataset.step, time: r.dataset.time,"
                " since: r.dataset.sincePrevious, label: r.querySelector('.tl-lat').textContent}))",
            )
            assert [r["step"] for r in shown] == [s["step"] for s in wanted], "every step, in order"
            assert [r["time"] or None for r in shown] == [s["time"] for s in wanted]
            latencies = _expected_latencies(wanted)
            assert [r["since"] for r in shown] == latencies, "trace's latencies"
            for r, latency in zip(shown, latencies, strict=True):
                if latency not in ("", "~"):  # a negative one: seen "before" the step above
                    assert r["label"] == (latency if latency[0] == "-" else f"+{latency}"), r
            assert "Ready written" in [r["step"] for r in shown if r["time"]]
            page.wait_for_selector(f"#watch li[data-type='ADDED']:has-text('{key}')")
            if _scheduler_available(cluster):
                page.wait_for_selector(
                    f"#scheduler li[data-reason='Scheduled'][data-pod='{key}']",
                    timeout=view.ms(10),
                )
                page.wait_for_selector(
                    f"#scheduler li[data-reason='FailedScheduling']"
                    f"[data-pod='{cluster.namespace}/nowhere']",
                    timeout=view.ms(30),
                )
                nowhere_row = page.locator(f"tr[data-pod='{cluster.namespace}/nowhere']")
                assert nowhere_row.get_attribute("data-node") == "", "shown, not scheduled"
            unnamed = page.evaluate(
                """() => [...document.querySelectorAll('button, input')].filter(e =>
                    !(e.getAttribute('aria-label') || e.textContent.trim()
                      || (e.labels && e.labels.length))).map(e => e.outerHTML)"""
            )
            assert unnamed == [], "every control has an accessible name"
            page.emulate_media(color_scheme="dark")  # the theme follows the system's
            assert page.evaluate("getComputedStyle(document.body).colorScheme") == "dark"
            _screenshot(page, "ui-dark.png")

            cluster.core.delete_namespaced_pod("web", cluster.namespace)
            page.wait_for_selector(
                f"tr[data-pod='{key}'][data-deleting='true']", timeout=view.ms(10)
            )
            wait_for(lambda: get_pod(cluster, "web") is None, 30, "the pod gone from the API")
            page.wait_for_selector(f"tr[data-pod='{key}']", state="detached", timeout=view.ms(5))
    finally:
        ui.stop()
        running.stop()


@pytest.mark.fake_only
def test_a_forced_relist_shows_the_410_and_the_relist_in_the_stream(
    cluster: ApiUnderTest, browser: Any
) -> None:
    fake = cluster.require_fake("compaction and failed watches on demand")
    ui = start_ui(connect(cluster.kubeconfig), {}, nodes=[cluster.node_name], port=0)
    try:
        with _viewing(browser, ui.url) as view:
            page = view.page
            watch = f"pods on {cluster.node_name}"
            page.wait_for_selector(f"#watch li[data-type='WATCH'][data-watch='{watch}']")
            fake.fail_next(1_000_000, 500, verb="watch")
            fake.drop_watches()
            page.wait_for_selector(
                f"#watch li[data-type='RECONNECT'][data-watch='{watch}']", timeout=view.ms(15)
            )
            cluster.core.create_namespaced_config_map(
                cluster.namespace, {"metadata": {"name": "tick"}}
            )
            fake.compact()  # the watch's resourceVersion is now too old
            fake.reset_faults()
            for kind in ("ERROR", "EXPIRED", "RELIST"):
                page.wait_for_selector(
                    f"#watch li[data-type='{kind}'][data-watch='{watch}']", timeout=view.ms(15)
                )
            error = page.locator(f"#watch li[data-type='ERROR'][data-watch='{watch}']").first
            assert "code=410" in error.inner_text()
            page.get_by_label("Filter").fill("410")
            visible = page.eval_on_selector_all(
                "#watch li:not([hidden])", "items => items.map(i => i.textContent)"
            )
            assert visible
            assert all("410" in line for line in visible), visible
            page.get_by_label("Filter").fill(watch)  # the node's pods: the whole sequence
            _screenshot(page, "ui-relist.png", "#watch-section")
    finally:
        ui.stop()


def test_the_demo_serves_the_view_with_ui(
    docker_env: DockerEnv, tmp_path: Path, browser: Any
) -> None:
    """`kubelet-sim demo --ui`: the sample's pods on the page, on the demo's nodes, and one's
    timeline. The demo brings its own control plane, so this runs once (the fake pass), as
    tests/cli/test_demo.py does; without the control plane's binaries it skips."""
    from kubelet_sim.controlplane.binaries import BinariesMissing, find_binaries
    from tests.cli.test_demo import DemoProcess

    try:
        find_binaries()
    except BinariesMissing as exc:
        pytest.skip(f"the demo needs control-plane binaries: {exc}".splitlines()[0])
    state = tmp_path / "state"
    images = ["--image", docker_env.busybox_image, "--pod-infra-image", docker_env.pause_image]
    demo = DemoProcess(state, "--nodes", "2", "--replicas", "3", "--ui", "--ui-port", "0", *images)
    try:
        url = demo.wait_line("web view: ", 90).split("web view: ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:")
        with _viewing(browser, url) as view:
            page = view.page
            for node in ("n1", "n2"):
                page.wait_for_selector(f"tr.ours[data-node='{node}'][data-ready='true']")
            ready = "tr[data-pod^='default/hello-'][data-phase='Running'][data-ready='true']"
            wait_for(lambda: page.locator(ready).count() == 3, 90, "the sample's 3 pods Ready")
            first = page.locator(ready).first
            assert first.get_attribute("data-node") in ("n1", "n2")
            first.locator("button").click()
            page.wait_for_selector(
                "#timeline[data-settled='true'] [data-step='Ready written'][data-time^='20']",
                timeout=view.ms(15),
            )
            steps = page.eval_on_selector_all(
                "#timeline [data-step]", "rows => rows.map(r => r.dataset.step)"
            )
            assert steps[:3] == ["created", "scheduled", "bound"]
            page.wait_for_selector("#scheduler li[data-reason='Scheduled']")
            _screenshot(page, "ui-demo.png")
            _screenshot(page, "ui-demo-timeline.png", "#timeline-section")
            page.get_by_role("button", name="Large type").click()
            assert (
                page.get_by_role("button", name="Large type").get_attribute("aria-pressed")
                == "true"
            )
        assert demo.stop(signal.SIGINT) == 0, "\n".join(demo.lines)
    finally:
        demo.kill()
        record = state / "demo.json"
        if record.exists():  # what a failed run left: its containers, by its label
            for key, value in json.loads(record.read_text())["labels"].items():
                docker_env.remove_labelled(f"{key}={value}")
