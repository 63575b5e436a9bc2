"""Errors in the words of the front-end that says them: ``rrcli serve`` and ``rrcli.Pool`` speak of
the request or the call, never of a jobs file's line, ``--resume``, jobs not run or
``--max-cost``; ``rrcli run`` keeps naming the line."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from runkit import read_jsonl, write_profile
from runkit import rrcli as run_rrcli
from servekit import Served

import rrcli

HI = [{"role": "user", "content": "Hi"}]
#: what only a batch run may say
BATCH_WORDS = ("line", "--resume", "jobs not run", "--max-cost")
PRICE = {"input": 1000.0, "output": 1000.0}  # USD a million tokens: $0.001 a token


def _batch_words(message: str) -> list[str]:
    return [word for word in BATCH_WORDS if word in message.lower()]


def _chat_only(tmp_path, url, **top):
    backends = [{"id": "b0", "base_url": url, "endpoints": ["chat"], "price": PRICE}]
    return write_profile(tmp_path / "pool.toml", backends, name="pool", **top)


def test_serve_errors_name_no_line(tmp_path, sim_server):
    """Through ``rrcli serve``: an embeddings request to a pool that serves none (400), chat
    messages that are not a list and an Anthropic request without messages (400, the field
    named), and a request after the budget is spent (429, ``insufficient_quota``, the budget
    named): none says a batch word."""
    sim = sim_server(output_tokens=10)
    path = _chat_only(tmp_path, sim.openai_url, budget={"max_cost_usd": 0.2})
    served = Served(path, tmp_path, "--no-auth")
    chat = {"model": "pool", "messages": HI, "max_tokens": 10}
    try:
        with httpx2.Client(timeout=30) as client:
            embeddings = client.post(
                served.url + "/v1/embeddings", json={"model": "pool", "input": "a"}
            )
            malformed = client.post(
                served.url + "/v1/chat/completions", json={"model": "pool", "messages": "Hi"}
            )
            anthropic = client.post(
                served.url + "/v1/messages", json={"model": "pool", "max_tokens": 10}
            )
            statuses = []
            for _ in range(40):
                spent = client.post(served.url + "/v1/chat/completions", json=chat)
                statuses.append(spent.status_code)
                if spent.status_code != 200:
                    break
    finally:
        served.stop()
    said = [
        embeddings.json()["error"]["message"],
        malformed.json()["error"]["message"],
        anthropic.json()["error"]["message"],
        spent.json()["error"]["message"],
    ]
    assert [[], [], [], []] == [_batch_words(message) for message in said]
    assert [400, 400, 400] == [embeddings.status_code, malformed.status_code, anthropic.status_code]
    assert said[0].startswith("no backend serves the embeddings endpoint")
    assert "body.messages must be an array of messages, got string" == said[1]
    assert "body.messages is missing" == said[2]
    assert (429, "insufficient_quota") == (spent.status_code, spent.json()["error"]["code"])
    assert said[3].startswith("the budget of $0.20 is spent")
    assert 200 == statuses[0]


def test_pool_call_errors_name_no_line(tmp_path, sim_server):
    """Through ``rrcli.Pool``: embeddings from a pool that serves none, messages that are not
    chat messages, and a call after the budget is spent each raise CallError in the pool's
    words, its type the client reads (``invalid_job``, ``budget``)."""
    sim = sim_server(output_tokens=10)
    path = _chat_only(tmp_path, sim.openai_url)

    async def caught(pool, call):
        with pytest.raises(rrcli.CallError) as error:
            await call(pool)
        return error.value

    async def main():
        async with rrcli.Pool.from_profile(path, max_cost=0.2) as pool:
            unserved = await caught(pool, lambda p: p.embed("a"))
            malformed = await caught(pool, lambda p: p.chat([{"role": "user"}]))
            for _ in range(40):
                try:
                    await pool.chat(HI, max_tokens=10)
                except rrcli.CallError as error:
                    return unserved, malformed, error
        raise AssertionError("the budget was never spent")

    errors = asyncio.run(main())
    assert [[], [], []] == [_batch_words(error.message) for error in errors]
    types = [error.type for error in errors]
    assert ["invalid_job", "invalid_job", "budget"] == types
    assert errors[2].message.startswith("the budget of $0.20 is spent")
    assert errors[2].message == errors[2].result["error"]["message"]


def test_run_names_the_line(tmp_path, sim_server):
    """``rrcli run`` says the same refusal with its line: ``line 2: no backend serves ...``."""
    sim = sim_server()
    path = _chat_only(tmp_path, sim.openai_url)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        '{"id": "a", "prompt": "Hi"}\n{"id": "b", "endpoint": "embeddings", "input": "a"}\n'
    )
    done = run_rrcli("run", jobs, "-p", path, "-q", "--out", tmp_path / "out.jsonl", cwd=tmp_path)
    assert 2 != done.returncode, done.stderr
    results = {r["id"]: r for r in read_jsonl(tmp_path / "out.jsonl")}
    message = results["b"]["error"]["message"]
    assert ("invalid", True) == (
        results["b"]["status"],
        message.startswith("line 2: no backend serves the embeddings endpoint"),
    )
