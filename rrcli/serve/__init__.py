"""``rrcli serve``: the OpenAI and Anthropic APIs in front of rrcli's pools, for programs whose
next request depends on the last answer (agents). A request is a job of the one engine
(``run.pool.Pool``): routed, gated, retried, failed over, budgeted, cached and traced as a line
of a jobs file. ``wires`` speaks each API, ``sessions`` finds a request's session, ``app`` has
the endpoints, ``dispatch`` is the ASGI app over them, ``server`` runs it on uvicorn with its
signals."""
