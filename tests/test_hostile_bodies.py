"""Hostile servers through the CLI: answers that never end, that never stop growing, and
connections closed under a request (docs/reliability.md).

Each test starts a real loopback server that misbehaves on purpose (tests/hostile.py) and runs
``rrcli run`` against it as a user would: every run ends within three times its deadline, and
in bounded memory.
"""

from __future__ import annotations

import functools
import itertools
import time
import zlib
from pathlib import Path

import orjson
import pytest
from hostile import Canned, chat
from runkit import calls, read_jsonl, rrcli, write_jobs, write_profile

MEMORY = 3 * 2**30  # the address space a run gets here: an unbounded read would not fit


def run_against(tmp_path: Path, server, jobs: int = 1, retry=None, memory=None, **backend):
    """``rrcli run`` of ``jobs`` jobs against ``server``: (result, seconds, result lines)."""
    entry = {"id": "h", "base_url": server.openai_url, **backend}
    profile = write_profile(tmp_path / "p.toml", [entry], retry={"max_retries": 0, **(retry or {})})
    path = write_jobs(tmp_path / "jobs.jsonl", jobs)
    started = time.monotonic()
    result = rrcli("run", path, "-p", profile, "-q", cwd=tmp_path, timeout=120, memory=memory)
    took = time.monotonic() - started
    return result, took, read_jsonl(tmp_path / "jobs.results.jsonl")


def attempt_seconds(tmp_path: Path) -> list[float]:
    """How long each attempt of a run took, as the run measured it (its call records): the
    process's start-up, which a loaded machine stretches, is no part of a deadline."""
    return [call["latency_ms"] / 1000 for call in calls(tmp_path / "jobs.traces.jsonl")]


def sse(*events: dict | str) -> list[bytes]:
    """SSE ``data:`` events (a str as it is, a dict as JSON)."""
    return [
        b"data: " + (e.encode() if isinstance(e, str) else orjson.dumps(e)) + b"\n\n"
        for e in events
    ]


def delta(text: str) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}}]}


STREAM_HEADERS = {"content-type": "text/event-stream"}
KEEP_ALIVE = b": keep-alive\n\n"


# --- 3. timeout is the attempt's deadline; stream_idle_timeout bounds a stream's gaps ------


def test_a_body_trickled_a_byte_a_second_ends_at_the_timeout(tmp_path, hostile_server):
    """A 200 whose body comes one byte a second (it would take minutes): with ``timeout = 2``
    the attempt fails as a transient ``timeout`` naming the limit and the key, within 3 × 2 s;
    a retry is a new attempt with its own deadline."""
    body = chat().body
    server = hostile_server(
        lambda _: Canned(
            200,
            {"content-type": "application/json"},
            chunks=(body[i : i + 1] for i in range(len(body))),
            gap=1.0,
        )
    )
    result, _, [line] = run_against(tmp_path, server, timeout=2, retry={"max_retries": 1})
    assert 1 == result.returncode, result.stderr
    assert ("timeout", True, 2) == (
        line["error"]["type"],
        line["error"]["retryable"],
        line["attempts"],
    )
    assert (
        "no answer within 2 s" in line["error"]["message"]
        and "`timeout`" in line["error"]["message"]
    )
    assert [True, True] == [2.0 <= took < 3 * 2.0 for took in attempt_seconds(tmp_path)]


def test_a_stream_of_keep_alive_comments_ends_at_the_timeout(tmp_path, hostile_server):
    """A stream that sends only keep-alive comments, forever, ten a second: comments are no
    progress, so ``timeout = 2`` (a stream's deadline until its first text) ends it."""
    server = hostile_server(
        lambda _: Canned(200, STREAM_HEADERS, chunks=itertools.repeat(KEEP_ALIVE), gap=0.1)
    )
    result, _, [line] = run_against(tmp_path, server, timeout=2, params={"stream": True})
    assert 1 == result.returncode, result.stderr
    assert "timeout" == line["error"]["type"]
    assert "`timeout`" in line["error"]["message"]
    [took] = attempt_seconds(tmp_path)
    assert 2.0 <= took < 3 * 2.0


def test_a_stream_that_stalls_after_its_text_ends_at_stream_idle_timeout(tmp_path, hostile_server):
    """Text, then keep-alive comments forever: the gap after the last text is bounded by
    ``stream_idle_timeout = 1`` (timeout = 30 no longer applies once text came), and the
    message names that limit and key."""
    chunks = itertools.chain(sse(delta("Hel")), itertools.repeat(KEEP_ALIVE))
    server = hostile_server(lambda _: Canned(200, STREAM_HEADERS, chunks=chunks, gap=0.1))
    result, _, [line] = run_against(
        tmp_path, server, timeout=30, stream_idle_timeout=1, params={"stream": True}
    )
    assert 1 == result.returncode, result.stderr
    assert ("timeout", True) == (line["error"]["type"], line["error"]["retryable"])
    assert "stalled 1 s" in line["error"]["message"]
    assert "`stream_idle_timeout`" in line["error"]["message"]
    [took] = attempt_seconds(tmp_path)
    assert 1.0 <= took < 3 * 1.0  # the idle limit after the text, far from the timeout's 30 s


def test_a_stream_making_progress_may_outlast_the_timeout(tmp_path, hostile_server):
    """A stream whose text comes every 0.3 s for 3 s, with ``timeout = 1`` and
    ``stream_idle_timeout = 1``: no gap is longer than the idle limit, so it completes ok."""
    pieces = sse(*[delta(f"{i} ") for i in range(10)], "[DONE]")
    server = hostile_server(lambda _: Canned(200, STREAM_HEADERS, chunks=pieces, gap=0.3))
    result, _, [line] = run_against(
        tmp_path, server, timeout=1, stream_idle_timeout=1, params={"stream": True}
    )
    assert 0 == result.returncode, result.stderr
    assert ("ok", "0 1 2 3 4 5 6 7 8 9 ") == (line["status"], line["output"])


# --- 4. a response has a size limit ---------------------------------------------------------


@functools.cache
def spaces(size: int) -> bytes:
    """``size`` spaces, one copy for every answer."""
    return b" " * size


@functools.cache
def gzip_bomb(size: int) -> bytes:
    """``size`` zero bytes, gzipped (about a thousandth of that)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(2**20)
    return b"".join([*(packer.compress(block) for _ in range(size // len(block))), packer.flush()])


HOSTILE_BODIES = {
    "endless": lambda: Canned(
        200, {"content-type": "application/json"}, chunks=itertools.repeat(b" " * 2**16)
    ),
    "endless-stream": lambda: Canned(
        200, STREAM_HEADERS, chunks=itertools.repeat(b"data: " + b"x" * 2**16)
    ),
    "gzip-bomb": lambda: Canned(
        200, {"content-type": "application/json", "content-encoding": "gzip"}, gzip_bomb(2**28)
    ),
    "huge": lambda: Canned(200, {"content-type": "application/json"}, spaces(70 * 2**20)),
}


@pytest.mark.parametrize("kind", HOSTILE_BODIES)
def test_a_body_past_max_response_bytes_is_response_too_large_in_bounded_memory(
    tmp_path, hostile_server, kind
):
    """An endless body (plain or a stream line that never ends), a gzip bomb of 256 MiB from 256 KB
    and a 70 MiB body, four at once, under a 3 GiB address space: each attempt fails as
    ``response_too_large`` past the default 64 MiB (counted decompressed), not retried, and
    the run ends without a MemoryError or a traceback."""
    make = HOSTILE_BODIES[kind]
    server = hostile_server(lambda _: make())
    result, took, lines = run_against(
        tmp_path, server, jobs=4, memory=MEMORY, retry={"max_retries": 3}, max_concurrency=4,
        params={"stream": kind == "endless-stream"},
    )  # fmt: skip
    assert 1 == result.returncode, result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    assert [("response_too_large", False, 1)] * 4 == [
        (r["error"]["type"], r["error"]["retryable"], r["attempts"]) for r in lines
    ]
    assert "max_response_bytes" in lines[0]["error"]["message"]
    assert 4 == len(server.requests)
    assert took < 60.0


def test_max_response_bytes_is_a_profile_key_and_a_declared_length_fails_early(
    tmp_path, hostile_server
):
    """``max_response_bytes = 1000``: an answer of 2,000 bytes whose Content-Length says so
    fails at once as ``response_too_large``; one of 900 bytes is read as usual."""
    size = itertools.cycle([2000, 900])

    def answer(_):
        reply = orjson.loads(chat().body)
        reply["choices"][0]["message"]["content"] = "x" * (next(size) - len(chat().body))
        return Canned(200, {"content-type": "application/json"}, orjson.dumps(reply))

    server = hostile_server(answer)
    result, _, lines = run_against(
        tmp_path, server, jobs=2, max_response_bytes=1000, max_concurrency=1
    )
    assert 1 == result.returncode, result.stderr
    assert ["response_too_large", None] == [
        (r.get("error") or {}).get("type") for r in sorted(lines, key=lambda r: r["id"])
    ]


# --- 16. keep-alive races ---------------------------------------------------------------------


def test_a_server_closing_idle_connections_needs_no_retry(tmp_path, hostile_server):
    """A server that closes a connection 50 ms after its last answer, with calls paced to
    arrive just then: a request that meets a closed pooled connection is sent again on a fresh
    one, uncounted, so 300 jobs with ``max_retries = 0`` all end ok after one attempt each."""
    server = hostile_server(lambda _: chat(), idle_close=0.05)
    result, _, lines = run_against(tmp_path, server, jobs=300, rpm=1200, max_concurrency=2)
    assert 0 == result.returncode, result.stderr
    assert {("ok", 1)} == {(r["status"], r["attempts"]) for r in lines}
    assert 300 == len(lines) == len(calls(tmp_path / "jobs.traces.jsonl"))


def test_calls_one_after_the_other_share_one_connection(tmp_path, hostile_server):
    """Calls one after the other to a server that keeps its connections open travel on one
    pooled connection: asking whether the server closed an idle one never drops a live one."""
    server = hostile_server(lambda _: chat())
    result, _, lines = run_against(tmp_path, server, jobs=20, max_concurrency=1)
    assert 0 == result.returncode, result.stderr
    assert (20, 1) == (len(lines), server.connections)


def test_the_new_limits_are_validated(tmp_path):
    """``stream_idle_timeout`` must be a number above 0 and ``max_response_bytes`` an integer of
    at least 1: each wrong value is an error naming its key, in a backend or in [defaults]."""
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": "http://127.0.0.1:9/v1", "stream_idle_timeout": 0}],
        defaults={"max_response_bytes": 0.5},
    )
    result = rrcli("validate", profile, cwd=tmp_path)
    assert 1 == result.returncode, result.stdout
    assert "stream_idle_timeout: must be greater than 0" in result.stdout
    assert "defaults.max_response_bytes: expected an integer" in result.stdout
