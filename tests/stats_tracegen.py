"""Synthetic traces that follow SPEC §5 exactly, for the stats tests and benchmark.

A small discrete-event model of `rrcli run`: every backend has `max_concurrency` lanes; a job's
attempts go to the backend it was routed to (round robin), each attempt takes the earliest free
lane, retries wait a backoff first. So the traces carry everything stats must handle — retries,
final errors, streamed calls with TTFT, sessions with several turns, prices, several runs — and,
because timestamps are whole milliseconds, calls that start exactly when another ends (the
half-open interval case).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from rrcli.records.traceschema import CALL_FIELDS, JOB_COUNTS, rfc3339


@dataclass(frozen=True, slots=True)
class SimBackend:
    """One deployment of the synthetic pool."""

    id: str
    model: str
    max_concurrency: int
    latency_ms: float
    price: dict | None = None
    error_rate: float = 0.05


POOL = (
    SimBackend("openai-a", "gpt-4o-mini", 4, 200.0, {"input": 0.15, "output": 0.6}),
    SimBackend("openai-b", "gpt-4o-mini", 2, 450.0, {"input": 0.15, "output": 0.6}, 0.15),
    SimBackend("local-vllm", "llama-3.1-8b", 3, 120.0, None, 0.0),
)


def run_records(
    run_id: str,
    *,
    jobs: int,
    start_ms: int,
    seed: int,
    pool: tuple[SimBackend, ...] = POOL,
    ended: bool = True,
) -> Iterator[dict]:
    """The run record, one call record per attempt, and (when `ended`) the run_end record."""
    rng = random.Random(seed)
    yield {
        "event": "run",
        "run_id": run_id,
        "ts": rfc3339(start_ms / 1000),
        "rrcli_version": "0.1.0",
        "profile": {
            "name": "synthetic",
            "strategy": "round_robin",
            "binding": "request",
            "backends": [
                {
                    "id": b.id,
                    "provider": "openai",
                    "model": b.model,
                    "host": f"{b.id}.example:443",
                    "max_concurrency": b.max_concurrency,
                    "price": b.price,
                }
                for b in pool
            ],
        },
        "queue": None,
        "results": None,
    }
    lanes = {b.id: [start_ms] * b.max_concurrency for b in pool}
    counts = dict.fromkeys(JOB_COUNTS, 0)
    for j in range(jobs):
        backend = pool[j % len(pool)]
        turns = 3 if j % 10 == 0 else 1
        stream = (j // 3) % 2 == 0
        ready = start_ms + j // 4
        failed = False
        for turn in range(turns):
            for attempt in range(1, 5):
                lane = heapq.heappop(lanes[backend.id])
                begin = max(lane, ready)
                span = int(rng.expovariate(1.0 / backend.latency_ms)) + rng.choice((0, 1, 5))
                end = begin + span
                heapq.heappush(lanes[backend.id], end)
                roll = rng.random()
                good = roll >= backend.error_rate
                final = good or attempt == 4 or roll < backend.error_rate / 4
                record = _call(run_id, j, turn, attempt, backend, stream, begin, end, rng, good)
                record["outcome"] = "ok" if good else ("error" if final else "retry")
                if not good and not final:
                    record["backoff_ms"] = float(rng.randint(0, 500))
                ready = end + int(record["backoff_ms"] or 0)
                yield record
                if final:
                    break
            if not good:
                failed = True
                break
        counts["error" if failed else "ok"] += 1
    if ended:
        end_ms = max(max(v) for v in lanes.values())
        yield {
            "event": "run_end",
            "run_id": run_id,
            "ts": rfc3339(end_ms / 1000),
            "jobs": counts,
            "interrupted": False,
            "budget": None,
            "halted": None,
        }


def _call(run_id, j, turn, attempt, backend, stream, begin, end, rng, good) -> dict:
    """One call record with every SPEC §5 field, in the SPEC's order."""
    latency = (end - begin) + round(rng.random(), 3)
    status = 200 if good else rng.choice((429, 503, 500))
    out_tokens = rng.choice((0, 1, 2, rng.randint(3, 400))) if good else None
    ttft = round(latency * rng.uniform(0.05, 0.5), 3) if (good and stream) else None
    values = {
        "event": "call",
        "run_id": run_id,
        "job_id": f"job-{j}",
        "session": f"job-{j}",
        "turn": turn,
        "attempt": attempt,
        "deployment": backend.id,
        "provider": "openai",
        "model": backend.model,
        "response_model": backend.model + "-2024" if good else None,
        "server_address": f"{backend.id}.example:443",
        "binding": None,
        "rebound_for": None,
        "outcome": "ok",
        "http_status": status,
        "error_type": None if good else f"http_{status}",
        "retry_after_ms": 1000.0 if status == 429 else None,
        "backoff_ms": None,
        "queue_ms": round(rng.random() * 5, 3),
        "ts_start": rfc3339(begin / 1000),
        "ts_end": rfc3339(end / 1000),
        "latency_ms": latency,
        "ttft_ms": ttft,
        "input_tokens": rng.randint(5, 900) if good else None,
        "output_tokens": out_tokens,
        "cached_input_tokens": None,
        "usage_estimated": False,
        "cost_usd": None,
        "cost_estimated": False,
        "stream": stream,
        "endpoint": "embeddings" if j % 5 == 4 else "chat",
    }
    return {k: values[k] for k in CALL_FIELDS}


def lines(records) -> bytes:
    """Records → JSONL bytes, one object a line."""
    return b"".join(orjson.dumps(r) + b"\n" for r in records)
