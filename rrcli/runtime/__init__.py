"""The run: set-up (runner), the loop over jobs (engine), routing (router, strategies), the gates
(local and Redis), the retry policy, and --dry-run's plan."""
