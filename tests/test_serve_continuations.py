"""Continuations through ``rrcli serve`` stay on the backend that holds their state."""

from __future__ import annotations

import httpx2
from runkit import write_profile
from servekit import Served, openai_backends

HI = [{"role": "user", "content": "Hi"}]


def test_a_responses_continuation_goes_back_to_its_backend(tmp_path, sim_server):
    """``previous_response_id`` is served by the backend that created the response (another
    sim would refuse the id), whichever backend round robin would pick."""
    a, b = sim_server(), sim_server()
    backends = openai_backends(a.openai_url, b.openai_url)
    path = write_profile(tmp_path / "pool.toml", backends, name="pool")
    served = Served(path, tmp_path, "--no-auth")
    pairs = []
    try:
        with httpx2.Client(timeout=30) as client:
            url = served.url + "/v1/responses"
            for n in range(4):
                if n % 2:  # one request more: the next response starts on the other backend
                    client.post(url, json={"model": "pool", "input": "Hello"})
                first = client.post(url, json={"model": "pool", "input": "Hello"})
                body = {
                    "model": "pool",
                    "input": "More",
                    "previous_response_id": first.json()["id"],
                }
                then = client.post(url, json=body)
                assert 200 == then.status_code, then.text
                pairs.append(
                    (first.headers["x-rrcli-deployment"], then.headers["x-rrcli-deployment"])
                )
    finally:
        served.stop()
    assert all(x == y for x, y in pairs)
    assert {"b0", "b1"} == {x for x, _ in pairs}


def test_a_paused_turn_is_finished_on_its_backend_in_one_answer(tmp_path, sim_server):
    """An Anthropic backend that pauses the turn (pause_turn): serve sends the continuation to
    the same backend and answers once, the two parts joined."""
    sim = sim_server()
    backend = {
        "id": "claude", "provider": "anthropic", "base_url": sim.url, "model": "sim",
        "headers": {"x-sim-mode": "pause-turn"},
    }  # fmt: skip
    path = write_profile(tmp_path / "pool.toml", [backend], name="pool")
    served = Served(path, tmp_path, "--no-auth")
    try:
        with httpx2.Client(timeout=30) as client:
            reply = client.post(
                served.url + "/v1/messages",
                json={"model": "pool", "max_tokens": 64, "messages": HI},
            )
    finally:
        served.stop()
    assert (200, "claude") == (reply.status_code, reply.headers["x-rrcli-deployment"])
    assert "end_turn" == reply.json()["stop_reason"]
    assert 2 == len(sim.received("/v1/messages"))
