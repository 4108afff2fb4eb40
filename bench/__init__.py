"""Benchmarks of kubelet-sim (run by hand, never by the test suite): see bench/README.md."""
