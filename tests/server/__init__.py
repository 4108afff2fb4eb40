"""The kubelet API server: who gets in, connections under load and abuse, logs, run,
exec/attach/port-forward (SPDY) and the listener nodes share."""
