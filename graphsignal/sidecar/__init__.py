"""Parts of the sidecar that read the store and hand what it measured to
the outside: the Prometheus exposition (/metrics), the uploader and the
version check. Each reads the store through graphsignal.sidecar.snapshot
only."""
