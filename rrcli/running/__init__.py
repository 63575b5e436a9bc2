"""The batch runner, ``rrcli run``: set-up and signals (runner), the options and their defaults,
the outputs, the workers and their job feed, the read-ahead of cache hits, --otlp's span process
(telemetry), --dry-run's plan and validate's checks. The engine it drives is ``rrcli.engine``.

It is not named ``run``: importing a subpackage binds it to its parent's attribute of that
name, and ``rrcli.run`` is the library's run function."""
