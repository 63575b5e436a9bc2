"""``rrcli serve`` heals: a backend down is probed again and comes back, a session bound to a
backend that died binds again, and ``/ready`` says whether a backend could take a request now.
The official OpenAI SDK in front of ``rrcli sim`` servers stopped and restarted on their port."""

from __future__ import annotations

import time

import httpx2
import pytest
from conftest import RunningSim
from runkit import calls, read_jsonl, write_profile
from servekit import Served, openai_backends
from test_traceschema import check_record

from rrcli.sim.behaviour import config_from_options

openai = pytest.importorskip("openai")

HI = [{"role": "user", "content": "Hi"}]
GOOD_KEY = "sk-the-right-key-0123"
KEY_VAR = "RR_HEAL_KEY"
RECOVER = 0.5  # the test profiles' [health] recover_after, seconds
BOUND = 15.0  # seconds a test waits at most for what it waits for (generous: a loaded machine)


def _port(sim: RunningSim) -> int:
    return int(sim.url.rsplit(":", 1)[1])


def _restart(sim: RunningSim, **options: object) -> RunningSim:
    """``sim`` stopped, and a new sim listening on its port with ``options``."""
    sim.stop()
    return RunningSim(config_from_options(**options), port=_port(sim))


def _ready(served: Served) -> tuple[int, bool]:
    reply = httpx2.get(served.url + "/ready", timeout=10)
    return reply.status_code, reply.json()["ready"]


def _wait_ready(served: Served, ready: bool) -> tuple[int, bool]:
    """/ready's answer once it says ``ready`` (or the last one after BOUND seconds)."""
    deadline = time.monotonic() + BOUND
    answer = _ready(served)
    while answer[1] is not ready and time.monotonic() < deadline:
        time.sleep(0.05)
        answer = _ready(served)
    return answer


def _client(served: Served, **headers: str):
    return openai.OpenAI(
        base_url=served.url + "/v1", api_key="none", max_retries=0, default_headers=headers
    )


def test_a_session_whose_backend_died_answers_its_next_turn_from_another(tmp_path, sim_server):
    """A session's first turn binds it to one backend; that backend is killed; the next turn
    is answered from the other within its retries (no failover set), and the traces say so:
    turn 0 "new", turn 1's answer "rebound" for connect_error, and the dead backend down."""
    sims = [sim_server(latency_ms=5), sim_server(latency_ms=5)]
    backends = openai_backends(*(s.openai_url for s in sims))
    retry = {"max_retries": 2, "backoff_initial": 0.05, "backoff_max": 0.1}
    path = write_profile(
        tmp_path / "pool.toml", backends, name="pool", binding="session", retry=retry
    )
    traces = tmp_path / "serve.traces.jsonl"
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
    try:
        client = _client(served, **{"x-session-id": "agent-1"})
        first = client.chat.completions.with_raw_response.create(model="pool", messages=HI)
        bound = first.headers["x-rrcli-deployment"]
        sims[int(bound[1:])].stop()
        history = [*HI, first.parse().choices[0].message.model_dump(), *HI]
        second = client.chat.completions.with_raw_response.create(model="pool", messages=history)
        moved = second.headers["x-rrcli-deployment"]
        third = client.chat.completions.with_raw_response.create(model="pool", messages=history)
    finally:
        code, err = served.stop()
    assert 0 == code, err
    assert {"b0", "b1"} == {bound, moved}
    assert moved == third.headers["x-rrcli-deployment"]
    trail = calls(traces)
    answered = [(c["turn"], c["deployment"], c["binding"], c["rebound_for"]) for c in trail
                if c["outcome"] == "ok"]  # fmt: skip
    assert [
        (0, bound, "new", None),
        (1, moved, "rebound", "connect_error"),
        (2, moved, "rebound", "connect_error"),
    ] == answered
    assert {"connect_error"} == {c["error_type"] for c in trail if c["outcome"] != "ok"}
    downs = [(r["deployment"], r["state"]) for r in read_jsonl(traces) if r["event"] == "backend"]
    assert [(bound, "down")] == downs


def test_a_revoked_key_restored_is_back_within_its_probe_interval(tmp_path, sim_server):
    """A backend's server restarted with another key answers 401: the backend goes down and
    /ready says false (it is the only one); the server restarted with the right key again, a
    probe brings the backend back within its probe interval: /ready true, the next request
    answered there, and the trace says down then up."""
    sim = sim_server(latency_ms=5, api_keys=(GOOD_KEY,))
    backends = openai_backends(sim.openai_url, credentials={"api_key_env": KEY_VAR})
    path = write_profile(
        tmp_path / "pool.toml", backends, name="pool", health={"recover_after": RECOVER}
    )
    traces = tmp_path / "serve.traces.jsonl"
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces), env={KEY_VAR: GOOD_KEY})
    restarted: list[RunningSim] = []
    try:
        client = _client(served)
        assert (
            "b0"
            == client.chat.completions.with_raw_response.create(model="pool", messages=HI).headers[
                "x-rrcli-deployment"
            ]
        )
        restarted.append(_restart(sim, latency_ms=5, api_keys=("sk-another-key-4567",)))
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(model="pool", messages=HI)
        revoked = _ready(served)
        restarted.append(_restart(restarted[-1], latency_ms=5, api_keys=(GOOD_KEY,)))
        restored = _wait_ready(served, True)
        back = client.chat.completions.with_raw_response.create(model="pool", messages=HI)
    finally:
        code, err = served.stop()
        for server in restarted:
            server.stop()
    assert 0 == code, err
    assert (503, False) == revoked
    assert (200, True) == restored
    assert "b0" == back.headers["x-rrcli-deployment"]
    for record in read_jsonl(traces):
        check_record(record)  # the trace's schema, the "up" record's included
    states = [(r["state"], r["reason"]) for r in read_jsonl(traces) if r["event"] == "backend"]
    assert [("down", "http_401"), ("up", "probe_ok")] == states


def test_ready_is_false_while_every_backend_refuses_connections_and_true_when_one_is_back(
    tmp_path, sim_server
):
    """Both backends' servers stopped: once a request has met each refusing connections past
    its retries, /ready is 503 and false; one server restarted on its port, /ready is true again
    within the probe interval and requests are answered there."""
    sims = [sim_server(latency_ms=5), sim_server(latency_ms=5)]
    backends = openai_backends(*(s.openai_url for s in sims))
    retry = {"max_retries": 1, "backoff_initial": 0.02, "backoff_max": 0.05}
    path = write_profile(
        tmp_path / "pool.toml", backends, name="pool", retry=retry,
        health={"recover_after": RECOVER},
    )  # fmt: skip
    served = Served(path, tmp_path, "--no-auth")
    restarted: list[RunningSim] = []
    try:
        client = _client(served)
        before = _ready(served)
        for sim in sims:
            sim.stop()
        for _ in sims:  # round robin: one request meets each backend
            with pytest.raises(openai.APIStatusError):
                client.chat.completions.create(model="pool", messages=HI)
        refused = _ready(served)
        restarted.append(RunningSim(config_from_options(latency_ms=5), port=_port(sims[1])))
        back = _wait_ready(served, True)
        answered = client.chat.completions.with_raw_response.create(model="pool", messages=HI)
    finally:
        code, err = served.stop()
        for server in restarted:
            server.stop()
    assert 0 == code, err
    assert [(200, True), (503, False), (200, True)] == [before, refused, back]
    assert "b1" == answered.headers["x-rrcli-deployment"]


def test_a_continuation_pinned_to_a_dead_backend_gets_the_apis_error(tmp_path, sim_server):
    """A bound session's response was made on one backend, then that backend dies: the request
    continuing it (``previous_response_id``) is answered with an error in OpenAI's shape, never
    sent to the other backend (which would not know the id); the session's next fresh request is
    answered by the other backend."""
    sims = [sim_server(latency_ms=5), sim_server(latency_ms=5)]
    backends = openai_backends(*(s.openai_url for s in sims))
    retry = {"max_retries": 1, "backoff_initial": 0.02, "backoff_max": 0.05}
    path = write_profile(
        tmp_path / "pool.toml", backends, name="pool", binding="session", retry=retry
    )
    traces = tmp_path / "serve.traces.jsonl"
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
    try:
        client = _client(served, **{"x-session-id": "agent-2"})
        made = client.responses.with_raw_response.create(model="pool", input="Hello")
        bound = made.headers["x-rrcli-deployment"]
        other = sims[1 - int(bound[1:])]
        sims[int(bound[1:])].stop()
        before = other.stats()["requests"]
        with pytest.raises(openai.APIStatusError) as pinned:
            client.responses.create(
                model="pool", input="More", previous_response_id=made.parse().id
            )
        sent_elsewhere = other.stats()["requests"] - before
        fresh = client.responses.with_raw_response.create(model="pool", input="Again")
    finally:
        code, err = served.stop()
    assert 0 == code, err
    error = pinned.value.response.json()["error"]
    assert (502, "connect_error") == (pinned.value.status_code, error["code"])
    assert 0 == sent_elsewhere
    assert bound != fresh.headers["x-rrcli-deployment"]
