"""``rrcli.Pool``: the engine of ``rrcli run`` called from a program, against real sim servers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from runkit import calls, write_profile

import rrcli

HI = [{"role": "user", "content": "Hi"}]


def _pool_file(tmp_path: Path, *urls: str, **top: object) -> Path:
    backends = [
        {"id": f"b{i}", "base_url": url, "endpoints": ["chat", "embeddings", "responses"]}
        for i, url in enumerate(urls)
    ]
    return write_profile(tmp_path / "pool.toml", backends, **top)


def _in_pool(path: Path, work, **options):
    async def main():
        async with rrcli.Pool.from_profile(path, **options) as pool:
            return await work(pool)

    return asyncio.run(main())


def test_chat_answers_with_the_record_a_result_line_holds(tmp_path, sim_server):
    """``pool.chat`` returns the result line's record, and the call is traced as a run's is."""
    sim = sim_server()
    traces = tmp_path / "pool.traces.jsonl"
    record = _in_pool(_pool_file(tmp_path, sim.openai_url), lambda p: p.chat(HI), traces=traces)
    assert ("ok", "b0", 1) == (record["status"], record["deployment"], record["attempts"])
    assert record["output"] and record["usage"]["output_tokens"] > 0
    assert [("b0", "ok")] == [(c["deployment"], c["outcome"]) for c in calls(traces)]


def test_stream_yields_text_as_it_comes_then_the_record(tmp_path, sim_server):
    """``pool.stream`` yields pieces of text, then the record whose output is their sum."""
    sim = sim_server(ttft_ms=5, tokens_per_s=2000)

    async def work(pool):
        return [piece async for piece in pool.stream(HI)]

    pieces = _in_pool(_pool_file(tmp_path, sim.openai_url), work)
    texts, record = pieces[:-1], pieces[-1]
    assert len(texts) > 1 and all(isinstance(t, str) for t in texts)
    assert "".join(texts) == record["output"]
    assert "chat/completions" in sim.received()[-1]["path"]
    assert True is sim.received()[-1]["body"]["stream"]


def test_embed_and_respond(tmp_path, sim_server):
    """``pool.embed`` gives one vector per input in order; ``pool.respond`` the Responses
    answer and its id."""
    sim = sim_server()

    async def work(pool):
        return await pool.embed(["a", "b", "c"]), await pool.respond("hello")

    vectors, response = _in_pool(_pool_file(tmp_path, sim.openai_url), work)
    assert 3 == len(vectors["embeddings"])
    assert "responses" == response["endpoint"] and response["response_id"]


def test_a_failed_call_raises_call_error_with_its_record(tmp_path, sim_server):
    """A call the backend refuses raises CallError: its type, the backend's status, the
    record."""
    sim = sim_server()
    path = write_profile(
        tmp_path / "pool.toml",
        [{"id": "b0", "base_url": sim.openai_url, "headers": {"x-sim-status": "400"}}],
    )
    with pytest.raises(rrcli.CallError) as caught:
        _in_pool(path, lambda p: p.chat(HI))
    error = caught.value
    assert ("http_400", 400, "error") == (error.type, error.status_code, error.result["status"])


def test_a_request_no_backend_can_take_is_invalid(tmp_path, sim_server):
    """Messages that are not chat messages raise CallError ``invalid_job`` naming the field."""
    sim = sim_server()
    with pytest.raises(rrcli.CallError) as caught:
        _in_pool(
            _pool_file(tmp_path, sim.openai_url),
            lambda p: p.chat([{"role": "nobody", "content": "x"}]),
        )
    assert "invalid_job" == caught.value.type
    assert "messages[0].role" in caught.value.message
    assert 0 == sim.stats()["requests"]


def test_a_session_stays_on_its_backend(tmp_path, sim_server):
    """With ``binding = "session"``, every call of a session goes to the backend it bound to."""
    a, b = sim_server(), sim_server()
    path = _pool_file(tmp_path, a.openai_url, b.openai_url, binding="session")

    async def work(pool):
        out = {}
        for session in ("s1", "s2", "s3", "s4"):
            records = [await pool.chat(HI, session=session) for _ in range(4)]
            out[session] = {r["deployment"] for r in records}
        return out

    bound = _in_pool(path, work)
    assert [1, 1, 1, 1] == [len(d) for d in bound.values()]


def test_a_stream_left_early_frees_its_slot(tmp_path, sim_server):
    """A reader that stops after the first text cancels the call: no call is left in flight."""
    sim = sim_server(ttft_ms=5, tokens_per_s=50)

    async def work(pool):
        stream = pool.stream(HI)
        first = await anext(stream)
        await stream.aclose()
        await asyncio.sleep(0.05)
        return first, sum(s.in_flight for s in pool.engine.router.states)

    first, in_flight = _in_pool(_pool_file(tmp_path, sim.openai_url), work)
    assert isinstance(first, str) and 0 == in_flight


def test_a_stream_left_early_is_traced_cancelled_and_charged(tmp_path, sim_server):
    """A reader that stops a priced stream early: its call is traced ``cancelled`` on its
    deployment, charged what its budget set aside for it (its usage is unknown), and the
    budget takes the next call."""
    sim = sim_server(ttft_ms=5, tokens_per_s=50, output_tokens=200)
    price = {"input": 200.0, "output": 1000.0}
    path = write_profile(
        tmp_path / "pool.toml",
        [{"id": "b0", "base_url": sim.openai_url, "endpoints": ["chat"], "price": price}],
    )
    traces = tmp_path / "pool.traces.jsonl"

    async def work(pool):
        stream = pool.stream(HI, max_tokens=200)
        await anext(stream)
        await stream.aclose()
        return await asyncio.wait_for(pool.chat(HI, max_tokens=10), 10)

    record = _in_pool(path, work, traces=traces, max_cost=1.0)
    cancelled, answered = calls(traces)
    seen = (cancelled["outcome"], cancelled["error_type"], cancelled["deployment"])
    assert ("cancelled", "client_disconnected", "b0") == seen
    assert (True, True) == (cancelled["cost_usd"] > 0, cancelled["cost_estimated"])
    assert ("ok", "ok") == (record["status"], answered["outcome"])
