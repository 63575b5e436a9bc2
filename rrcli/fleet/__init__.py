"""What several processes and hosts share through Redis: the Redis gate (its hub and Lua
scripts), the shared budget's ledger, and the work queue on Redis Streams (its store, its
scripts and its report)."""
