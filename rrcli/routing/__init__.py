"""Where a call goes and whether it may go: the router (strategies, the first_available queue,
the live per-backend state and its lease), the gates (local; the Redis one is ``fleet``'s),
the scopes a gate serves, which backends may serve a job (eligibility, serving), backend
health, the retry policy, the budget's check, and the run's switch (control)."""
