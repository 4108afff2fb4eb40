"""Which part of a pod an event names (GenerateContainerRef's field paths)."""

from __future__ import annotations

from kubelet_sim.pod.spec import PodView
from kubelet_sim.podworkers.event_refs import container_spec, event_ref


def test_field_paths_for_app_init_and_ephemeral_containers() -> None:
    view = PodView.from_api(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
            "spec": {
                "containers": [{"name": "app"}],
                "initContainers": [{"name": "side", "restartPolicy": "Always"}],
                "ephemeralContainers": [{"name": "debugger"}],
            },
        }
    )
    paths = {}
    for name in ("app", "side", "debugger"):
        spec = container_spec(view, name)
        assert spec is not None
        paths[name] = event_ref(view, spec).field_path
    assert paths == {
        "app": "spec.containers{app}",
        "side": "spec.initContainers{side}",
        "debugger": "spec.ephemeralContainers{debugger}",
    }
    assert event_ref(view).field_path == ""
