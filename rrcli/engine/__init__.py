"""The engine every front-end runs on: a job routed, gated, sent, retried, failed over, cached,
budgeted and traced (engine; one attempt: attempts; a session's and a paused turn's history:
turns; a stream's text as it arrives: echo), built by one assembly (assembly: ``open_engine``)
from its options (options: ``EngineOptions``), the response cache in a run (cached), the
budget's set-up (money), the run's counters (summary) and its failures logged (failures, quiet).
The front-ends over it are the batch runner (``rrcli.running``), the pool a program calls
(``rrcli.pool``) and the gateway (``rrcli.serve``, over the pool); it imports none of them."""
