"""`kubelet-sim demo`: a whole cluster on one machine (a real control plane as child
processes, virtual nodes in this process) and the scheduler-to-kubelet handoff shown live."""
