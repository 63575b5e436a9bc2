"""The simulated backend: the behaviour model (no I/O) and the `rrcli sim` HTTP server."""
