"""Labels on every container we create; from them alone the agent's state can be rebuilt."""

NODE = "io.kubelet-sim.node"
POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"
