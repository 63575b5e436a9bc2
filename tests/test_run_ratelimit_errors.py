"""A 429 that says when its budget resets, end to end through `rrcli run` against `rrcli sim`.

Servers such as OpenAI's may answer a 429 without Retry-After but with their rate-limit headers
(``x-ratelimit-remaining-requests: 0``, ``x-ratelimit-reset-requests: 700ms``); the retry waits
for that reset instead of a blind backoff. The test reads what a user reads: the trace."""

from __future__ import annotations

import json
from datetime import datetime

from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile

EPS = 0.03  # seconds of slack for event-loop scheduling


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def test_a_429_without_retry_after_waits_for_the_reset_its_headers_name(tmp_path, sim_server):
    """The first call draws a 429 carrying no Retry-After, only "requests spent, reset in
    700ms": its trace record says retry_after_ms 700 and backoff_ms 700 (not the profile's
    10-50 ms backoff), the retry starts no sooner than 700 ms after the 429, and the job ends ok.
    """
    server = sim_server(latency_ms=5)
    spent = {
        "retry-after": None,  # the sim's own 429 headers removed: only the reset remains
        "retry-after-ms": None,
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "700ms",
    }
    headers = {
        "x-sim-status": "429",
        "x-sim-times": "1",
        "x-sim-response-headers": json.dumps(spent),
    }
    backend = {"id": "a", "base_url": server.openai_url, "headers": headers}
    profile = write_profile(tmp_path / "p.toml", [backend])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert ["ok"] == [r["status"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")]
    first, second = calls(tmp_path / "jobs.traces.jsonl")
    assert ("retry", 429, 700.0, 700.0) == (
        first["outcome"], first["http_status"], first["retry_after_ms"], first["backoff_ms"]
    )  # fmt: skip
    assert ("ok", 2) == (second["outcome"], second["attempt"])
    assert ts(second["ts_start"]) >= ts(first["ts_end"]) + 0.7 - EPS
