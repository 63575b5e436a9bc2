"""Hostile replies through the CLI: a server that pauses a turn forever, 200s that carry no
answer, adaptive state an earlier run left in Redis, and trace files whose numbers make no sense
(docs/reliability.md).

Each server test starts a real loopback server that answers with the shape under test
(tests/hostile.py) and runs ``rrcli run`` against it as a user would; the Redis test a real
redis-server.
"""

from __future__ import annotations

import itertools
import resource
import threading
import time
from pathlib import Path

import orjson
import pytest
import redis
from hostile import Canned, chat, error
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile
from test_redis_gate import _server

from rrcli.records.traceschema import rfc3339


def json_answer(body: dict) -> Canned:
    return Canned(200, {"content-type": "application/json"}, orjson.dumps(body))


def anthropic_message(content: object, stop_reason: str = "end_turn", **extra: object) -> Canned:
    """An Anthropic message with ``content`` as given (left out when it is ``...``)."""
    body: dict = {"id": "msg_hostile", "type": "message", "role": "assistant", "model": "m"}
    if content is not ...:
        body["content"] = content
    body |= {"stop_reason": stop_reason, "usage": {"input_tokens": 3, "output_tokens": 2}}
    return json_answer({**body, **extra})


# --- 5. continuations are bounded ----------------------------------------------------------


@pytest.mark.parametrize("limit", [None, 3])
def test_a_turn_paused_forever_ends_after_max_continuations(tmp_path, hostile_server, limit):
    """A server that answers every request with Anthropic's pause_turn: the turn is continued
    ``max_continuations`` times (default 10), then the job is an error of type
    ``too_many_continuations`` whose message names the key; nothing is retried, the run exits 1
    in seconds, and a --resume runs the job again."""
    text = [{"type": "text", "text": "thinking..."}]
    server = hostile_server(lambda _: anthropic_message(text, "pause_turn"))
    retry = {} if limit is None else {"max_continuations": limit}
    backend = {"id": "an", "provider": "anthropic", "base_url": server.url}
    profile = write_profile(tmp_path / "p.toml", [backend], retry=retry)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    started = time.monotonic()
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path, timeout=60)
    assert 1 == result.returncode, result.stderr
    assert time.monotonic() - started < 20.0
    expected_calls = (10 if limit is None else limit) + 1
    assert expected_calls == len(server.requests)
    traced = calls(tmp_path / "jobs.traces.jsonl")
    assert ["ok"] * (expected_calls - 1) + ["error"] == [c["outcome"] for c in traced]
    assert "too_many_continuations" == traced[-1]["error_type"]
    [line] = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ("error", "too_many_continuations", False) == (
        line["status"],
        line["error"]["type"],
        line["error"]["retryable"],
    )
    assert "max_continuations" in line["error"]["message"]
    assert expected_calls == line["attempts"]


def test_max_continuations_is_validated(tmp_path):
    """A max_continuations that is negative or absurd is a profile error naming the key and
    its bound; nothing is sent."""
    backend = {"id": "a", "base_url": "http://127.0.0.1:9/v1"}
    for bad in (-1, 10**6):
        profile = write_profile(tmp_path / "p.toml", [backend], retry={"max_continuations": bad})
        result = rrcli("validate", profile, cwd=tmp_path)
        assert 1 == result.returncode
        assert "retry.max_continuations" in result.stdout + result.stderr
        assert "1000" in result.stdout + result.stderr


# --- 15. a 200 that carries no answer ---------------------------------------------------------


def openai_message(message: dict, finish_reason: str | None = "stop") -> Canned:
    choice = {"index": 0, "message": message, "finish_reason": finish_reason}
    return json_answer({"id": "chatcmpl-hostile", "model": "m", "choices": [choice]})


def openai_stream(*deltas: dict, finish_reason: str = "stop") -> Canned:
    """A chat stream of ``deltas``, then a chunk with ``finish_reason``, then [DONE]."""
    chunks = [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
    chunks.append({"index": 0, "delta": {}, "finish_reason": finish_reason})
    events = b"".join(
        b"data: " + orjson.dumps({"id": "c", "model": "m", "choices": [c]}) + b"\n\n"
        for c in chunks
    )
    return Canned(200, {"content-type": "text/event-stream"}, events + b"data: [DONE]\n\n")


TOOL_CALL = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}

NONSENSE = {
    "openai-empty-message": ("openai", openai_message({})),
    "openai-null-content": ("openai", openai_message({"role": "assistant", "content": None})),
    "openai-stream-of-nothing": ("openai", openai_stream({"role": "assistant"}, finish_reason="")),
    "anthropic-no-content": ("anthropic", anthropic_message(...)),
    "anthropic-empty-content": ("anthropic", anthropic_message([])),
    "anthropic-null-content": ("anthropic", anthropic_message(None)),
}

LEGITIMATE = {
    "empty-stop": (openai_message({"role": "assistant", "content": ""}), "", "stop"),
    "empty-length": (openai_message({"content": ""}, "length"), "", "length"),
    "tool-call-only": (
        openai_message({"content": None, "tool_calls": [TOOL_CALL]}, "tool_calls"),
        "",
        "tool_calls",
    ),
    "refusal": (openai_message({"content": None, "refusal": "no"}), "", "stop"),
    "streamed-empty-stop": (openai_stream({"role": "assistant"}), "", "stop"),
    "anthropic-tool-use": (
        anthropic_message([{"type": "tool_use", "id": "t", "name": "f", "input": {}}], "tool_use"),
        "",
        "tool_calls",
    ),
}


def one_backend(tmp_path: Path, server, provider: str, **retry: object) -> Path:
    url = server.openai_url if provider == "openai" else server.url
    backend = {"id": "h", "provider": provider, "base_url": url}
    return write_profile(tmp_path / "p.toml", [backend], retry=retry)


@pytest.mark.parametrize("shape", NONSENSE)
def test_a_200_with_no_answer_is_an_invalid_response_retried_then_resumed(
    tmp_path, hostile_server, shape
):
    """A 200 whose message is ``{}``, whose content is null without tool calls, a stream that
    ends with none, or an Anthropic message with no content blocks: each attempt fails as
    ``invalid_response`` (transient: retried), the job ends as that error after its retries,
    and --resume sends it again (here to a server that now answers, so it ends ok)."""
    provider, nonsense = NONSENSE[shape]
    answers = {"now": nonsense}
    server = hostile_server(lambda _: answers["now"])
    profile = one_backend(tmp_path, server, provider, max_retries=2)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    stream = ("--stream",) if "stream" in shape else ()
    result = rrcli("run", jobs, "-p", profile, *stream, cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    traced = calls(tmp_path / "jobs.traces.jsonl")
    assert ["retry", "retry", "error"] == [c["outcome"] for c in traced]
    assert {"invalid_response"} == {c["error_type"] for c in traced}
    [line] = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ("error", "invalid_response", True, 3) == (
        line["status"],
        line["error"]["type"],
        line["error"]["retryable"],
        line["attempts"],
    )
    answers["now"] = (
        chat() if provider == "openai" else anthropic_message([{"type": "text", "text": "ok"}])
    )
    resumed = rrcli("run", jobs, "-p", profile, *stream, "--resume", cwd=tmp_path)
    assert 0 == resumed.returncode, resumed.stderr
    assert ["error", "ok"] == [r["status"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")]
    assert "ok" == read_jsonl(tmp_path / "jobs.results.jsonl")[-1]["output"]


@pytest.mark.parametrize("shape", LEGITIMATE)
def test_a_legitimate_empty_answer_stays_ok(tmp_path, hostile_server, shape):
    """An empty text that finished (``stop`` or ``length``), a reply that is only tool calls or
    a refusal, a stream that finished with no text: real answers, ok at the first attempt."""
    answer, output, finish_reason = LEGITIMATE[shape]
    server = hostile_server(lambda _: answer)
    provider = "anthropic" if shape.startswith("anthropic") else "openai"
    profile = one_backend(tmp_path, server, provider)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    stream = ("--stream",) if "stream" in shape else ()
    result = rrcli("run", jobs, "-p", profile, *stream, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    [line] = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ("ok", output, finish_reason, 1) == (
        line["status"],
        line["output"],
        line["finish_reason"],
        line["attempts"],
    )


# --- 15. trace numbers that cannot be true, and very many groups ------------------------------

T0 = 1_800_000_000_000  # ms since the epoch


def trace_call(start: int, end: int, **extra: object) -> dict:
    """A call record of a well-formed trace: [start, end) in ms since the epoch."""
    record = {
        "event": "call", "run_id": "r", "job_id": "j", "deployment": "d", "outcome": "ok",
        "ts_start": rfc3339(start / 1000), "ts_end": rfc3339(end / 1000),
        "latency_ms": float(end - start), "ttft_ms": None, "input_tokens": 1,
        "output_tokens": 1, "stream": False,
    }  # fmt: skip
    return record | extra


def stats_json(path: Path, cwd: Path) -> dict:
    result = rrcli("stats", path, "--json", cwd=cwd)
    assert 0 == result.returncode, result.stderr
    return orjson.loads(result.stdout)


def test_stats_counts_impossible_call_numbers_as_malformed(tmp_path):
    """Call records whose numbers cannot be true — a latency of −5,000,000,000 ms, a negative
    TTFT or token count, a ts_end before the ts_start, a latency that is not its interval's —
    are counted as malformed and left out: the percentiles are those of the true calls."""
    good = [trace_call(T0 + i, T0 + i + 100 * (i + 1)) for i in range(3)]
    absurd = [
        trace_call(T0, T0 + 100, latency_ms=-5e9),
        trace_call(T0, T0 + 100, ttft_ms=-1.0, stream=True),
        trace_call(T0, T0 + 100, output_tokens=-7),
        trace_call(T0 + 100, T0, latency_ms=100.0),
        trace_call(T0, T0 + 100, latency_ms=5e9),
    ]
    path = tmp_path / "t.traces.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in good + absurd))
    summary = stats_json(path, tmp_path)
    assert 5 == summary["malformed_lines"]
    assert 3 == summary["total"]["calls"]
    assert {"p50": 200.0, "p95": 290.0, "p99": 298.0} == summary["total"]["latency_ms"]


def test_stats_of_50000_deployments_takes_seconds(tmp_path):
    """A trace naming 50,000 deployments (one call each): `rrcli stats` prints the table of
    every one, and --json the same numbers as a small trace would, in a couple of seconds of
    CPU each (it took 45 s when each group was summarised on its own)."""
    n = 50_000
    path = tmp_path / "many.traces.jsonl"
    with open(path, "wb") as out:
        for i in range(n):
            start = T0 + (i % 60) * 1000
            out.write(orjson.dumps(trace_call(start, start + 500, deployment=f"d{i}")) + b"\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    table = rrcli("stats", path, cwd=tmp_path, env={"COLUMNS": "200"})  # one footer line
    middle = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = stats_json(path, tmp_path)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert 0 == table.returncode, table.stderr
    assert n + 6 == len(table.stdout.splitlines())  # title, head, 2 rules, total, footer
    assert n == len(summary["groups"])
    one = next(g for g in summary["groups"] if g["key"] == "d123")
    assert (1, 1, 500.0) == (one["calls"], one["peak_in_flight"], one["latency_ms"]["p50"])
    assert (n, 834) == (summary["total"]["calls"], summary["total"]["peak_in_flight"])
    for start, end in ((before, middle), (middle, after)):
        cpu = end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime
        assert cpu < 8.0


# --- 11. stale shared state ------------------------------------------------------------------


@pytest.fixture
def redis_url():
    for server in _server():
        yield server.url


def after_429s(count: int):
    """An answer: a 429 (no Retry-After) to the first ``count`` requests, then a success held
    0.3 s, so calls overlap."""
    seen, lock = itertools.count(), threading.Lock()

    def answer(_):
        with lock:
            n = next(seen)
        return error(429) if n < count else chat(delay=0.3)

    return answer


def test_an_adaptive_cap_left_in_redis_never_limits_a_later_run(
    tmp_path, hostile_server, redis_url
):
    """An ``adaptive = true`` run whose 429s shrink the shared cap (kept in Redis for an hour)
    leaves it there; a later run of the same backend with ``adaptive = false`` uses its whole
    ``max_concurrency`` (the server sees 4 at once), and an adaptive run with another
    ``max_concurrency`` starts from that cap, not from state computed for the old one."""

    def run(server, cap: int, adaptive: bool, jobs: int) -> None:
        backend = {"id": "h", "base_url": server.openai_url, "max_concurrency": cap}
        gate = {"kind": "redis", "url": redis_url, "adaptive": adaptive}
        profile = write_profile(tmp_path / "p.toml", [backend], gate=gate, retry={"max_retries": 6})
        path = write_jobs(tmp_path / "jobs.jsonl", jobs)
        result = rrcli("run", path, "-p", profile, "--overwrite", "-q", cwd=tmp_path)
        assert 0 == result.returncode, result.stderr

    run(hostile_server(after_429s(4)), 4, True, 4)
    with redis.Redis.from_url(redis_url) as client:
        assert int(client.hget("rrcli:{h}:aimd:4", "cap")) < 4  # the adaptive run shrank it
    plain = hostile_server(after_429s(0))
    run(plain, 4, False, 8)
    assert 4 == plain.peak
    wider = hostile_server(after_429s(0))
    run(wider, 6, True, 12)
    assert 6 == wider.peak
