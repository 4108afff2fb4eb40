"""What the tests of the handoff stream (the demo's, `kubelet-sim demo`, and `stream()` on its
own) hold its printed steps to."""

from __future__ import annotations

from collections.abc import Sequence

# The stream prints a step late rather than hold the later ones for more than 3 s; on a
# loaded CI machine Docker's side may lag that long, so the tests, which check the order, give
# the stream time enough to wait for it (KUBELET_SIM_HANDOFF_HOLD for the demo).
STREAM_HOLD = 15.0
FIRST_WRITE = "first status written"


def handoff_steps(
    *before_the_node: str, containers: Sequence[str], init: Sequence[str] = ()
) -> list[str]:
    """A pod's handoff, its steps in order: created, what the API did before the node saw it
    (`scheduled`, `bound`), the node's steps, its init containers' and then its containers'
    creates and starts, and Ready written."""
    return [
        "created",
        *before_the_node,
        "seen by the node",
        "admitted",
        FIRST_WRITE,
        "sandbox created",
        "sandbox started",
        *(f"init container {name} {step}" for name in init for step in ("created", "started")),
        *(f"container {name} {step}" for name in containers for step in ("created", "started")),
        "Ready written",
    ]


def in_order(steps: list[str], expected: list[str]) -> bool:
    """`steps` are `expected` in order, but for the first status write: the status manager's,
    beside the runtime, so anywhere after the admission and before Ready."""
    others = [s for s in steps if s != FIRST_WRITE]
    if others != [s for s in expected if s != FIRST_WRITE] or steps.count(FIRST_WRITE) != 1:
        return False
    return steps.index("admitted") < steps.index(FIRST_WRITE) < steps.index("Ready written")
