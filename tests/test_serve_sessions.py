"""Many agents at once through ``rrcli serve`` with ``binding = "session"``."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import httpx2
from runkit import calls, write_profile
from servekit import Served, openai_backends

SESSIONS, TURNS, CAP = 100, 5, 4


async def _conversation(client: httpx2.AsyncClient, url: str, n: int) -> list[str]:
    history: list[dict] = []
    served_by = []
    for turn in range(TURNS):
        history.append({"role": "user", "content": f"session {n} turn {turn}"})
        body = {"model": "pool", "messages": history}
        reply = await client.post(url, json=body, headers={"x-session-id": f"s{n}"})
        assert 200 == reply.status_code, reply.text
        served_by.append(reply.headers["x-rrcli-deployment"])
        history.append(reply.json()["choices"][0]["message"])
    return served_by


def test_a_hundred_sessions_of_five_turns_each_stay_on_their_backends(tmp_path, sim_server):
    """100 concurrent sessions of 5 turns each: every call of a session on one backend (in the
    traces too), both backends used, and no server ever saw more than its cap."""
    sims = [sim_server(latency_ms=5, cap=CAP), sim_server(latency_ms=5, cap=CAP)]
    backends = openai_backends(*(s.openai_url for s in sims), max_concurrency=CAP)
    path = write_profile(tmp_path / "pool.toml", backends, name="pool", binding="session")
    traces = tmp_path / "serve.traces.jsonl"
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))

    async def main():
        limits = httpx2.Limits(max_connections=SESSIONS)
        async with httpx2.AsyncClient(timeout=120, limits=limits) as client:
            url = served.url + "/v1/chat/completions"
            return await asyncio.gather(*(_conversation(client, url, n) for n in range(SESSIONS)))

    try:
        served_by = asyncio.run(main())
    finally:
        code, _ = served.stop()
    assert 0 == code
    assert [1] * SESSIONS == [len(set(d)) for d in served_by]
    per_session = defaultdict(set)
    for call in calls(traces):
        per_session[call["session"]].add(call["deployment"])
    assert SESSIONS == len(per_session)
    assert [1] * SESSIONS == [len(d) for d in per_session.values()]
    assert {"b0", "b1"} == {d for ds in served_by for d in ds}
    stats = [s.stats() for s in sims]
    assert [True, True] == [s["peak_concurrency"] <= CAP for s in stats]
    assert [0, 0] == [s["rate_limited"] for s in stats]
    assert SESSIONS * TURNS == sum(s["requests"] for s in stats)
