"""What a pod may reach of the node: admission's gates, host access, privileged containers, the
security context, fsGroup ownership and secrets kept out of logs."""
