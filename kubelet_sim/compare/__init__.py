"""`kubelet-sim compare`: the same pod scenarios on our node and on a reference node (a real
kubelet's) of one cluster, at once, and what agrees and what differs, scenario by scenario.

- `scenarios`: the scenarios (a Pod manifest and how to observe it), shipped ones in builtin/;
- `states`: a pod's status normalised to a comparable state, and a pod's record (pure);
- `verdict`: records in, a verdict per scenario out (pure);
- `runner`: the API part: namespace, pods on both nodes, the package's informers, clean-up;
- `node_view`: the two Node objects normalised and judged (pure);
- `report`: the table for people and the JSON object.

Programmatically: `run_compare(connect(kubeconfig), "n1", "kind-worker", resolve([...]),
image=...)` returns a `Comparison`; its `verdicts()` are what `report.table` and
`report.as_json` show.
"""

from kubelet_sim.compare.node_view import NodeComparison, compare_nodes
from kubelet_sim.compare.report import as_json, node_lines, table
from kubelet_sim.compare.runner import CompareError, Comparison, run_compare
from kubelet_sim.compare.scenarios import (
    Scenario,
    ScenarioError,
    builtin_scenarios,
    load_scenario_file,
    parse_scenario,
    resolve,
)
from kubelet_sim.compare.states import GONE, PodRecord, PodState, normalise
from kubelet_sim.compare.verdict import Verdict, judge, judge_all

__all__ = [
    "GONE",
    "CompareError",
    "Comparison",
    "NodeComparison",
    "PodRecord",
    "PodState",
    "Scenario",
    "ScenarioError",
    "Verdict",
    "as_json",
    "builtin_scenarios",
    "compare_nodes",
    "judge",
    "judge_all",
    "load_scenario_file",
    "node_lines",
    "normalise",
    "parse_scenario",
    "resolve",
    "run_compare",
    "table",
]
