"""Streams through ``rrcli serve``: relayed as they arrive, cancelled when the client leaves."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx2
import pytest
from runkit import calls, write_profile
from servekit import Served, openai_backends

CHAT = {"model": "pool", "messages": [{"role": "user", "content": "Hi"}], "stream": True}


def _served(tmp_path, sim, *args):
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    return Served(path, tmp_path, "--no-auth", *args)


def test_the_first_text_arrives_while_the_backend_still_streams(tmp_path, sim_server):
    """A backend streaming for about 2 s: the client reads the first text through serve long
    before the backend's stream ends, and then every piece, in order, as the backend sent it."""
    sim = sim_server(ttft_ms=20, tokens_per_s=16, output_tokens=32)
    served = _served(tmp_path, sim)
    try:
        with httpx2.Client(timeout=30) as client:
            started = time.monotonic()
            with client.stream("POST", served.url + "/v1/chat/completions", json=CHAT) as reply:
                lines = reply.iter_lines()
                first = next(line for line in lines if line.startswith("data: "))
                first_at = time.monotonic() - started
                rest = [line for line in lines if line.startswith("data: ")]
            ended_at = time.monotonic() - started
    finally:
        served.stop()
    assert '"role":"assistant"' in first
    assert "data: [DONE]" == rest[-1]
    assert ended_at > 1.5 and first_at < ended_at / 3


async def _first_texts(url: str, n: int) -> list[float]:
    """Seconds to the first text of ``n`` streamed answers read whole, one after the other
    on one connection (the first, which opens it, left out)."""
    seconds = []
    async with httpx2.AsyncClient(timeout=30) as client:
        for _ in range(n + 1):
            started, first = time.perf_counter(), None
            async with client.stream("POST", url + "/chat/completions", json=CHAT) as reply:
                async for line in reply.aiter_lines():
                    if first is None and '"content":"' in line and '"content":""' not in line:
                        first = time.perf_counter() - started
            assert first is not None
            seconds.append(first)
    return seconds[1:]


def test_the_first_text_comes_as_soon_as_straight_from_the_backend(tmp_path, sim_server):
    """Streamed answers one after the other, read whole: through serve the first text
    reaches the client about when it does straight from the backend (the fastest of seven), not
    a delayed ACK (~40 ms) later, which is what a server that leaves Nagle's algorithm on adds
    (the margin is for a loaded machine: the hop itself costs a few ms)."""
    sim = sim_server(ttft_ms=100, tokens_per_s=20, output_tokens=4)
    served = _served(tmp_path, sim)
    try:
        direct = asyncio.run(_first_texts(sim.openai_url, 7))
        through = asyncio.run(_first_texts(served.url + "/v1", 7))
    finally:
        served.stop()
    added = min(through) - min(direct)  # the fastest of each: a loaded machine only adds
    assert added < 0.025, f"{added * 1000:.1f} ms added: through {through}, direct {direct}"


def test_a_client_that_leaves_mid_stream_cancels_the_call(tmp_path, sim_server):
    """A client that closes a stream after its first text: the backend's stream is dropped
    at once, not read to its end, the call is traced ``cancelled`` by the client on the
    deployment that served it, and the server serves the next request."""
    sim = sim_server(ttft_ms=20, tokens_per_s=8, output_tokens=64)
    traces = tmp_path / "serve.traces.jsonl"
    served = _served(tmp_path, sim, "--traces", str(traces))
    try:
        with httpx2.Client(timeout=30) as client:
            url = served.url + "/v1/chat/completions"
            with client.stream("POST", url, json=CHAT) as reply:
                next(line for line in reply.iter_lines() if line.startswith("data: "))
            deadline = time.monotonic() + 5
            while sim.stats()["concurrency"] and time.monotonic() < deadline:
                time.sleep(0.05)
            left = sim.stats()["concurrency"]
            after = client.post(url, json={**CHAT, "stream": False})
    finally:
        served.stop()
    assert (0, 200) == (left, after.status_code)
    seen = [(c["outcome"], c["error_type"], c["deployment"], c["stream"]) for c in calls(traces)]
    expected = [("cancelled", "client_disconnected", "b0", True), ("ok", None, "b0", False)]
    assert expected == seen


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_before_the_answer_cancels_the_call(tmp_path, sim_server, stream):
    """A client that gives up on a call before its answer starts (a plain call, or a stream
    before its first text): the backend's call is dropped, its slot freed, and the trace
    holds it as ``cancelled`` by the client."""
    sim = sim_server(ttft_ms=3000)
    traces = tmp_path / "serve.traces.jsonl"
    served = _served(tmp_path, sim, "--traces", str(traces))
    try:
        url = served.url + "/v1/chat/completions"
        with httpx2.Client(timeout=0.5) as client, contextlib.suppress(httpx2.ReadTimeout):
            client.post(url, json={**CHAT, "stream": stream})
        deadline = time.monotonic() + 5
        while (sim.stats()["concurrency"] or not calls(traces)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = sim.stats()["concurrency"]
    finally:
        served.stop()
    seen = [(c["outcome"], c["error_type"], c["deployment"]) for c in calls(traces)]
    assert (0, [("cancelled", "client_disconnected", "b0")]) == (left, seen)
