"""``rrcli serve``'s own rules, with a plain HTTP client: keys, bad bodies, sessions, SIGTERM."""

from __future__ import annotations

import threading
import time

import httpx2
from runkit import calls, write_profile
from servekit import Served, openai_backends

HI = [{"role": "user", "content": "Hi"}]
CHAT = {"model": "pool", "messages": HI}


def test_keys_bodies_and_sizes_are_checked(tmp_path, sim_server):
    """No key or a wrong one is 401; a body that is not JSON 400; the right key is served."""
    sim = sim_server()
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--key-env", "KEYS", env={"KEYS": "k1,k2"})
    try:
        url = served.url + "/v1/chat/completions"
        with httpx2.Client(timeout=30) as client:
            assert 401 == client.post(url, json=CHAT).status_code
            assert 401 == client.post(url, json=CHAT, headers={"x-api-key": "no"}).status_code
            ok = client.post(url, json=CHAT, headers={"authorization": "Bearer k2"})
            bad = client.post(url, content=b"{not json", headers={"x-api-key": "k1"})
    finally:
        served.stop()
    assert (200, "b0") == (ok.status_code, ok.headers["x-rrcli-deployment"])
    assert 400 == bad.status_code and "error" in bad.json()


def test_sessions_stay_on_their_backend(tmp_path, sim_server):
    """With binding = "session", every request of a session (named by the path, a header or the
    body) is served by one backend."""
    a, b = sim_server(), sim_server()
    backends = openai_backends(a.openai_url, b.openai_url)
    path = write_profile(tmp_path / "pool.toml", backends, name="pool", binding="session")
    served = Served(path, tmp_path, "--no-auth")
    seen: dict[str, set[str]] = {}
    try:
        with httpx2.Client(timeout=30) as client:
            for n in range(8):
                for _ in range(3):
                    s = f"s{n}"
                    by_path = client.post(f"{served.url}/s/{s}/v1/chat/completions", json=CHAT)
                    by_header = client.post(
                        served.url + "/v1/chat/completions",
                        json=CHAT,
                        headers={"x-session-id": s},
                    )
                    by_user = client.post(
                        served.url + "/v1/chat/completions", json={**CHAT, "user": s}
                    )
                    for r in (by_path, by_header, by_user):
                        seen.setdefault(s, set()).add(r.headers["x-rrcli-deployment"])
    finally:
        served.stop()
    assert [1] * 8 == [len(d) for d in seen.values()]
    assert {"b0", "b1"} == set().union(*seen.values())


def test_sigterm_answers_the_requests_in_flight_then_exits_0(tmp_path, sim_server):
    """SIGTERM with slow requests in flight: each is answered, then the server exits 0 and the
    traces hold every call."""
    sim = sim_server(latency_ms=1500)
    traces = tmp_path / "serve.traces.jsonl"
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
    statuses: list[int] = []

    def one() -> None:
        with httpx2.Client(timeout=30) as client:
            statuses.append(client.post(served.url + "/v1/chat/completions", json=CHAT).status_code)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    while sim.stats()["requests"] < 4:
        pass
    code, _ = served.stop()
    for t in threads:
        t.join(30)
    assert (0, [200, 200, 200, 200]) == (code, statuses)
    assert 4 == len(calls(traces))


def test_the_profiles_serve_table_sets_the_keys_and_the_body_limit(tmp_path, sim_server):
    """``[serve] keys_env`` names the client keys and ``max_body_bytes`` the largest body: a
    larger one is answered 413 in the API's shape."""
    sim = sim_server()
    path = write_profile(
        tmp_path / "pool.toml",
        openai_backends(sim.openai_url),
        name="pool",
        serve={"keys_env": "POOL_KEYS", "max_body_bytes": 2000},
    )
    served = Served(path, tmp_path, env={"POOL_KEYS": "k9"})
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 3000}]}
    try:
        with httpx2.Client(timeout=30, headers={"x-api-key": "k9"}) as client:
            url = served.url + "/v1/chat/completions"
            ok = client.post(url, json=CHAT)
            too_big = client.post(url, json=big)
            anthropic_big = client.post(served.url + "/v1/messages", json=big)
            refused = client.post(url, json=CHAT, headers={"x-api-key": "other"})
    finally:
        served.stop()
    assert (200, 413, 401) == (ok.status_code, too_big.status_code, refused.status_code)
    assert "over 2000 bytes" in too_big.json()["error"]["message"]
    assert "error" == anthropic_big.json()["type"]


def test_health_ready_models_and_metrics(tmp_path, sim_server):
    """/health and /ready answer 200 (a HEAD of /health too, its head alone); /v1/models lists
    the pool and its model; /metrics counts the requests answered, by API and status, and the
    answers of each deployment."""
    sim = sim_server()
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth")
    try:
        with httpx2.Client(timeout=30) as client:
            health = client.get(served.url + "/health").status_code
            head = client.head(served.url + "/health", timeout=5)
            ready = client.get(served.url + "/ready").status_code
            models = [m["id"] for m in client.get(served.url + "/v1/models").json()["data"]]
            for _ in range(3):
                client.post(served.url + "/v1/chat/completions", json=CHAT)
            client.post(served.url + "/v1/chat/completions", json={**CHAT, "model": "nope"})
            metrics = client.get(served.url + "/metrics").text
    finally:
        served.stop()
    assert (200, 200, ["sim", "pool"]) == (health, ready, models)
    assert (200, b"") == (head.status_code, head.content)
    lines = set(metrics.splitlines())
    assert 'rrcli_serve_requests_total{api="openai",endpoint="chat",status="200"} 3.0' in lines
    assert 'rrcli_serve_requests_total{api="openai",endpoint="chat",status="404"} 1.0' in lines
    assert 'rrcli_deployment_answers_total{deployment="b0"} 3.0' in lines
    assert 'rrcli_deployment_calls_in_flight{deployment="b0"} 0.0' in lines


def test_a_rate_limited_pool_answers_429_with_retry_after(tmp_path, sim_server):
    """A backend's 429 (retries spent) is passed on with its Retry-After; while every backend
    then cools down, a request is answered 429 at once, never sent upstream."""
    sim = sim_server(retry_after_ms=5000)
    backends = openai_backends(sim.openai_url, headers={"x-sim-status": "429"})
    path = write_profile(tmp_path / "pool.toml", backends, name="pool", retry={"max_retries": 0})
    served = Served(path, tmp_path, "--no-auth")
    try:
        with httpx2.Client(timeout=30) as client:
            first = client.post(served.url + "/v1/chat/completions", json=CHAT)
            second = client.post(served.url + "/v1/messages", json={**CHAT, "max_tokens": 8})
    finally:
        served.stop()
    assert (429, "5") == (first.status_code, first.headers["retry-after"])
    assert 429 == second.status_code and "cooling" in second.json()["error"]["message"]
    assert 1 <= int(second.headers["retry-after"]) <= 5
    assert 1 == sim.stats()["requests"]


def test_kill_9_leaves_every_answered_call_in_the_traces(tmp_path, sim_server):
    """The server killed with SIGKILL right after its last answer: the traces hold a call
    record for every request that was answered."""
    sim = sim_server()
    traces = tmp_path / "serve.traces.jsonl"
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
    with httpx2.Client(timeout=30) as client:
        client.post(served.url + "/v1/chat/completions", json=CHAT)  # the run record's flush
        time.sleep(0.5)
        answered = [
            client.post(served.url + "/v1/chat/completions", json=CHAT).status_code
            for _ in range(5)
        ]
        served.proc.kill()
    served.proc.wait(10)
    assert [200] * 5 == answered
    assert 6 == len(calls(traces))


def test_unknown_paths_and_methods_get_the_apis_error_shape(tmp_path, sim_server):
    """A path not served is 404 and a method an endpoint does not take 405 (naming the one it
    does), each in the error shape of the API the path belongs to; a session's prefix serves
    the API's paths only; the server goes on serving."""
    sim = sim_server()
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth")
    try:
        with httpx2.Client(timeout=30) as client:
            unknown = client.post(served.url + "/v1/chat/complete", json=CHAT)
            messages = client.get(served.url + "/v1/messages")
            sessioned = client.get(served.url + "/s/abc/health")
            ok = client.post(served.url + "/s/abc/v1/chat/completions", json=CHAT)
    finally:
        served.stop()
    assert (404, "invalid_request_error") == (unknown.status_code, unknown.json()["error"]["type"])
    assert "/v1/chat/complete" in unknown.json()["error"]["message"]
    assert (405, "POST", "error") == (
        messages.status_code, messages.headers["allow"], messages.json()["type"]
    )  # fmt: skip
    assert (404, 200) == (sessioned.status_code, ok.status_code)
