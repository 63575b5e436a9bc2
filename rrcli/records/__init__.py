"""Records: jobs in, results and traces out, and the trace schema they share."""
