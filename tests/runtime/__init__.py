"""The container runtime: the Docker adapter against a real engine, its pure translations, the
contract it shares with the fake runtime, images and container GC."""
