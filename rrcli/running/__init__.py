"""A run: set-up and signals (runner), the options and their defaults, the loop over jobs
(engine, turns), the outputs, the workers and their job feed, the response cache in a run,
the budget's set-up (money), --otlp's span process (telemetry), --dry-run's plan and
validate's checks; the pool a program calls (pool).

It is not named ``run``: importing a subpackage binds it to its parent's attribute of that
name, and ``rrcli.run`` is the library's run function."""
