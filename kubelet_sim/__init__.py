"""kubelet-sim: a small, honest kubelet that runs pods as Docker containers."""

__version__ = "0.1.0"
