"""Test a controller against a real control plane and kubelet-sim nodes: the public API.

`Cluster` works anywhere (`with Cluster(nodes=3) as cluster: ...`); with pytest, the plugin
(kubelet_sim/testing/plugin.py, installed with the package) gives the fixtures
`kubelet_sim_cluster` and `kubelet_sim_namespace`. `python_image` makes the image a controller
runs from in its pods, on this host, with no registry. Importing this package starts nothing.

Public, and nothing else of the Python package is: the names in `__all__`, imported from
`kubelet_sim.testing`; `Cluster`'s constructor arguments, its methods whose names do not begin
with `_` and the attributes its docstring names; the plugin's fixtures and `--kubelet-sim-*`
options. Every other module, name and attribute (the submodules of this package by their own
paths among them) is private: it changes when the code needs it to, without notice.

What public promises: a public name keeps its meaning, and its arguments keep theirs; a change
that could break code using it comes with an entry in CHANGELOG.md saying what to change; its
type hints ship with the package (py.typed) and are checked with `mypy --strict`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubelet_sim.runtime.python_image import python_image
    from kubelet_sim.testing.cluster import Cluster, ClusterError, KubectlMissing

__all__ = ["Cluster", "ClusterError", "KubectlMissing", "python_image"]


def __getattr__(name: str) -> Any:
    # Lazily: pytest loads the plugin in every session of a project that installed us, and
    # the cluster's imports (the control plane's `cryptography`, Docker, the API client) are
    # only for the sessions that use it; the image's, Docker, for those that build one.
    if name == "python_image":
        from kubelet_sim.runtime import python_image  # noqa: PLC0415 (lazily, as said)

        return python_image.python_image
    if name in __all__:
        from kubelet_sim.testing import cluster  # noqa: PLC0415 (lazily, as said)

        return getattr(cluster, name)
    raise AttributeError(name)
