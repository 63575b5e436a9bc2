"""``rrcli serve`` reloading its profile on SIGHUP: the backends it names from then on, with no
request dropped, and an invalid profile kept out. A real server, real sims, the openai SDK."""

from __future__ import annotations

import signal
import time

import openai
from runkit import calls, write_profile
from servekit import Served, openai_backends

CHAT = {"model": "pool", "messages": [{"role": "user", "content": "Hi"}]}


def _client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)


def _deployment(client: openai.OpenAI) -> str:
    raw = client.chat.completions.with_raw_response.create(**CHAT)
    return raw.headers["x-rrcli-deployment"]


def _until(client: openai.OpenAI, deployment: str) -> list[str]:
    """Requests one after the other until one is answered by ``deployment`` (at most 15 s):
    the deployments that answered them."""
    seen, deadline = [], time.monotonic() + 15
    while deployment not in seen and time.monotonic() < deadline:
        seen.append(_deployment(client))
    return seen


def test_sighup_swaps_a_backend_while_a_stream_runs_on_it(tmp_path, sim_server):
    """A stream runs slowly through b0 when the profile is rewritten to name b1 alone and
    SIGHUP sent: the stream ends whole on b0 (all its text, finish_reason stop, ok in the
    trace), and once b1 answers a request, every later request goes to b1 and none to b0."""
    slow, fresh = sim_server(output_tokens=20, tokens_per_s=5), sim_server()
    path = tmp_path / "pool.toml"
    traces = tmp_path / "serve.traces.jsonl"
    write_profile(path, openai_backends(slow.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
    try:
        client = _client(served)
        stream = client.chat.completions.create(
            **CHAT, stream=True, stream_options={"include_usage": True}
        )
        chunks = iter(stream)
        first = next(chunks)  # the stream is in flight on b0
        (b1,) = openai_backends(fresh.openai_url)
        write_profile(path, [{**b1, "id": "b1"}], name="pool")
        served.proc.send_signal(signal.SIGHUP)
        swapped = _until(client, "b1")
        later = [_deployment(client) for _ in range(5)]
        rest = [first, *chunks]
    finally:
        code, err = served.stop()
    text = "".join(c.choices[0].delta.content or "" for c in rest if c.choices)
    ends = [c.choices[0].finish_reason for c in rest if c.choices]
    finishes = [end for end in ends if end is not None]
    usage = [c.usage.completion_tokens for c in rest if c.usage is not None]
    streamed = [c for c in calls(traces) if c.get("stream")]
    assert ("b1", ["b1"] * 5, 0) == (swapped[-1], later, code)
    assert (["stop"], [20], 20) == (finishes, usage, len(text.split()))
    assert [("b0", "ok")] == [(c["deployment"], c["outcome"]) for c in streamed]
    assert 1 + len(swapped) - 1 == slow.stats()["requests"]  # the stream, and those before b1
    assert "rrcli.profile_reloaded" in err and "Traceback" not in err


def test_an_invalid_profile_on_sighup_is_kept_out(tmp_path, sim_server):
    """SIGHUP after the profile was rewritten with an error (and a literal key in it): the
    server logs ``rrcli.profile_not_reloaded`` naming the file and the error, never the key,
    and goes on answering from the backend it had; no traceback."""
    sim, other = sim_server(), sim_server()
    path = tmp_path / "pool.toml"
    write_profile(path, openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth")
    try:
        client = _client(served)
        before = _deployment(client)
        secret = "sk-reload-secret-0123456789"
        (bad,) = openai_backends(other.openai_url, rpm=-5)
        write_profile(path, [{**bad, "credentials": {"api_key": secret}}], name="pool")
        served.proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        after = [_deployment(client) for _ in range(3)]
    finally:
        code, err = served.stop()
    assert ("b0", ["b0"] * 3, 0) == (before, after, code)
    assert 0 == other.stats()["requests"]
    logged = [line for line in err.splitlines() if "rrcli.profile_not_reloaded" in line]
    assert 1 == len(logged)
    assert str(path) in logged[0] and "rpm" in logged[0]
    assert secret not in err and "Traceback" not in err
