"""The engine every front-end runs on: a job routed, gated, sent, retried, failed over, cached,
budgeted and traced (engine, turns), its options, the response cache in a run (cached), the
budget's set-up (money), the run's counters (summary) and its failures logged (failures, quiet).
The front-ends over it are the batch runner (``rrcli.running``), the pool a program calls
(``rrcli.pool``) and the gateway (``rrcli.serve``, over the pool); it imports none of them."""
