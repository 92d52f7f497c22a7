"""The sidecar: the heavy half of graphsignal-run (poller, sources, server),
in its own process so that nothing it does, not even a crash, reaches the
workload. The supervisor (graphsignal.launch.supervisor) starts it after
the workload and feeds it through graphsignal.channel.

This package's __init__ and channel module import nothing heavy: the
supervisor imports them before the workload starts.

It also holds the parts that read the store and hand what it measured to
the outside: the Prometheus exposition (/metrics), the uploader and the
version check, each reading the store through graphsignal.sidecar.snapshot
only."""
