"""The `kubelet-sim` command: `kubelet-sim [options]` runs nodes; `watch`, `trace`, `demo`,
`ui`, `compare`, `join-token` and `image` are subcommands of their own."""

from __future__ import annotations

import sys

from kubelet_sim.cli.compare import compare_app
from kubelet_sim.cli.demo import demo_app
from kubelet_sim.cli.image import image_app
from kubelet_sim.cli.join_token import join_token_app
from kubelet_sim.cli.node_command import app
from kubelet_sim.cli.tools import trace_app, watch_app
from kubelet_sim.cli.ui import ui_app

SUBCOMMANDS = {
    "watch": watch_app,
    "trace": trace_app,
    "demo": demo_app,
    "ui": ui_app,
    "compare": compare_app,
    "join-token": join_token_app,
    "image": image_app,
}


def main() -> None:
    """`kubelet-sim watch|trace|demo|ui|compare|join-token|image …` run those; anything else
    runs the node."""
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        SUBCOMMANDS[sys.argv[1]](args=sys.argv[2:], prog_name=f"kubelet-sim {sys.argv[1]}")
    else:
        app()


__all__ = ["main"]
