"""The node itself: its Node object and Lease, several nodes in one process, the agent as a whole,
its credentials, its threads (supervised, on demand, idle) and its work queue."""
