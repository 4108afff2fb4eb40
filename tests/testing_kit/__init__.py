"""kubelet_sim.testing (the pytest plugin) and the control plane it brings: binaries, secrets, the
reference node."""
