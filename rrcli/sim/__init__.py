"""The simulated backend: the behaviour model (no I/O), the `rrcli sim` HTTP server, and the
in-process ``sim`` provider (``provider.py``, the registry's adapter for ``provider = "sim"``)."""
