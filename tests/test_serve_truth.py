"""``rrcli serve`` tells its clients and its operator the truth, through the official SDKs in
front of ``rrcli sim`` backends: a backend's auth or quota failure is the gateway's 502/503
naming the deployment, never a 401 the client would take for its own, and never an address, a
key's variable or a key; /v1/models, /metrics and every /v1/ path need the client key;
/metrics says each deployment's state, calls, errors, tokens, spend and the budget; answers
name the backend's model whether streamed or not; job ids have one form; refused requests are
counted and the first of each kind traced; the made client key is shown once the port is
bound."""

from __future__ import annotations

import itertools
import socket
import threading

import httpx2
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from runkit import calls, read_jsonl, rrcli, write_profile
from servekit import Served

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

HI = [{"role": "user", "content": "Hi"}]
KEY = "client-key-1"
BACKEND_KEY = "sk-backend-secret-777"
PRICE = {"input": 1000.0, "output": 2000.0}  # USD a million tokens
CAP = {"max_tokens": 16}  # a budget reserves each call's most output


def _backend(id: str, url: str, model: str, **extra: object) -> dict[str, object]:
    return {"id": id, "base_url": url, "model": model, "endpoints": ["chat"], **extra}


def _serve(tmp_path, backends, **top) -> tuple[Served, object]:
    traces = tmp_path / "serve.traces.jsonl"
    path = write_profile(tmp_path / "pool.toml", backends, name="pool", **top)
    env = {"KEYS": KEY, "BAD_KEY": "wrong-key", "GOOD_KEY": BACKEND_KEY}
    served = Served(path, tmp_path, "--key-env", "KEYS", "--traces", str(traces), env=env)
    return served, traces


def _sdks(served: Served):
    o = openai.OpenAI(base_url=served.url + "/v1", api_key=KEY, max_retries=0)
    a = anthropic.Anthropic(base_url=served.url, api_key=KEY, max_retries=0)
    return o, a


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_upstream_failures_name_the_deployment_never_its_address_or_key(tmp_path, sim_server):
    """A backend whose key is refused is a 502 "upstream authentication failed at deployment
    `azure-east`" (OpenAI and Anthropic SDKs alike), never a 401; an account out of quota a 503
    naming its deployment; a backend refusing connections a 502 naming the deployment and the
    error type; once every backend of a model is down, a 503 naming each and why. No
    answer holds an address, a key's variable or a key; the log and the trace keep them. A
    backend's 400 about the body is passed on, its key masked."""
    locked = sim_server(api_keys=(BACKEND_KEY,))
    sim = sim_server()
    gone = f"http://127.0.0.1:{_closed_port()}/v1"
    quota = {"x-sim-status": "429", "x-sim-error-code": "insufficient_quota"}
    bad_body = {"x-sim-status": "400", "x-sim-error-message": f"max_tokens bad ({BACKEND_KEY})"}
    backends = [
        _backend("azure-east", locked.openai_url, "m-auth", credentials={"api_key_env": "BAD_KEY"}),
        _backend("quota-1", sim.openai_url, "m-quota", headers=quota),
        _backend("gone-1", gone, "m-gone"),
        _backend("body-1", locked.openai_url, "m-body", headers=bad_body,
                 credentials={"api_key_env": "GOOD_KEY"}),
    ]  # fmt: skip
    served, traces = _serve(tmp_path, backends, retry={"max_retries": 1})
    said = []
    try:
        o, a = _sdks(served)
        with pytest.raises(openai.InternalServerError) as auth:
            o.chat.completions.create(model="m-auth", messages=HI)
        with pytest.raises(anthropic.InternalServerError) as auth_down:
            a.messages.create(model="m-auth", max_tokens=8, messages=HI)
        with pytest.raises(openai.InternalServerError) as quota_out:
            o.chat.completions.create(model="m-quota", messages=HI)
        with pytest.raises(openai.InternalServerError) as refused:
            o.chat.completions.create(model="m-gone", messages=HI)
        with pytest.raises(openai.BadRequestError) as body:
            o.chat.completions.create(model="m-body", messages=HI)
        with pytest.raises(openai.InternalServerError) as streamed:
            o.chat.completions.create(model="m-auth", messages=HI, stream=True)
    finally:
        code, log = served.stop()
    errors = (auth, auth_down, quota_out, refused, body, streamed)
    for caught in errors:
        said.append(caught.value.message if hasattr(caught.value, "message") else "")
        said.append(caught.value.response.text)
    assert [502, 503, 503, 502, 400, 503] == [e.value.status_code for e in errors]
    assert "upstream authentication failed at deployment `azure-east`" in said[1]
    assert "no healthy backend left for this job: azure-east (http_401) down" in said[3]
    assert "upstream quota exhausted at deployment `quota-1`" in said[5]
    assert "upstream call failed at deployment `gone-1` (connect_error)" in said[7]
    assert "max_tokens bad" in said[9] and "http_400" in said[9]
    for text in said:
        assert [] == [w for w in ("127.0.0.1", "BAD_KEY", "wrong-key", BACKEND_KEY) if w in text]
    assert "BAD_KEY" in log and 0 == code  # the operator's log says what to check
    down = {r["deployment"] for r in read_jsonl(traces) if r["event"] == "backend"}
    assert {"azure-east", "quota-1"} <= down


def test_models_metrics_and_every_v1_path_need_the_client_key(tmp_path, sim_server):
    """Without the client key /v1/models, /metrics and /v1/messages/count_tokens are 401 (the
    SDKs raise AuthenticationError); with it they answer; /health and /ready need none; with
    ``[serve] open_metrics = true`` /metrics alone answers without a key."""
    sim = sim_server()
    served, _ = _serve(tmp_path, [_backend("b0", sim.openai_url, "m-real")])
    try:
        with httpx2.Client(timeout=30) as client:
            bare = [client.get(served.url + p).status_code for p in ("/v1/models", "/metrics")]
            keyed = [
                client.get(served.url + p, headers={"x-api-key": KEY}).status_code
                for p in ("/v1/models", "/metrics")
            ]
            open_ = [client.get(served.url + p).status_code for p in ("/health", "/ready")]
        o = openai.OpenAI(base_url=served.url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            o.models.list()
        a = anthropic.Anthropic(base_url=served.url, api_key="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            a.messages.count_tokens(model="pool", messages=HI)
        counted = _sdks(served)[1].messages.count_tokens(model="pool", messages=HI)
        assert {"m-real", "pool"} == {m.id for m in _sdks(served)[0].models.list()}
    finally:
        served.stop()
    assert ([401, 401], [200, 200], [200, 200]) == (bare, keyed, open_)
    assert counted.input_tokens > 0
    path = write_profile(
        tmp_path / "open.toml",
        [_backend("b0", sim.openai_url, "m-real")],
        name="pool",
        serve={"open_metrics": True},
    )
    opened = Served(path, tmp_path, "--key-env", "KEYS", env={"KEYS": KEY})
    try:
        with httpx2.Client(timeout=30) as client:
            metrics = client.get(opened.url + "/metrics").status_code
            models = client.get(opened.url + "/v1/models").status_code
    finally:
        opened.stop()
    assert (200, 401) == (metrics, models)


def _scrape(served: Served) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics read with the client key and parsed as Prometheus does: {(sample name,
    sorted labels): value}."""
    text = httpx2.get(served.url + "/metrics", headers={"x-api-key": KEY}, timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_tell_state_calls_errors_tokens_spend_and_budget(tmp_path, sim_server):
    """Real traffic through the SDKs (plain and streamed, both APIs, sessions) over a healthy
    backend, one whose key is refused and one rate-limited: /metrics, parsed by
    prometheus_client, says each deployment's state (up, down, cooling), its cap, its calls by
    outcome and failures by error type, its tokens and spend as the trace has them, the sessions
    bound, the admission waits, the budget's limit, spent and reserved, and the refusals by
    reason; no label holds a session name or a model a client sent."""
    good, locked, busy = (
        sim_server(),
        sim_server(api_keys=(BACKEND_KEY,)),
        sim_server(retry_after_ms=60000),
    )
    backends = [
        _backend("good", good.openai_url, "m-good", price=PRICE, max_concurrency=3, params=CAP),
        _backend("locked", locked.openai_url, "m-locked", price=PRICE, params=CAP,
                 credentials={"api_key_env": "BAD_KEY"}),
        _backend("busy", busy.openai_url, "m-busy", price=PRICE, params=CAP,
                 headers={"x-sim-status": "429"}),
    ]  # fmt: skip
    served, traces = _serve(
        tmp_path, backends, binding="session", budget={"max_cost_usd": 5.0},
        retry={"max_retries": 0},
    )  # fmt: skip
    try:
        o, a = _sdks(served)
        for n in range(3):
            o.chat.completions.create(model="m-good", messages=HI, user=f"secret-session-{n}")
        text = "".join(
            c.choices[0].delta.content or ""
            for c in o.chat.completions.create(model="m-good", messages=HI, stream=True)
            if c.choices
        )
        a.messages.create(model="m-good", max_tokens=16, messages=HI)
        for model in ("m-locked", "m-busy"):
            with pytest.raises(openai.APIStatusError):
                o.chat.completions.create(model=model, messages=HI)
        with pytest.raises(openai.NotFoundError):
            o.chat.completions.create(model="client-secret-model", messages=HI)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=served.url + "/v1", api_key="no", max_retries=0).models.list()
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=served.url + "/v1", api_key="no", max_retries=0
            ).chat.completions.create(model="m-good", messages=HI)
        seen = _scrape(served)
    finally:
        served.stop()
    assert text
    records = calls(traces)

    def at(name: str, **labels: str) -> float:
        return seen[(name, tuple(sorted(labels.items())))]

    states = {
        d: [s for s in ("up", "cooling", "down") if at("rrcli_deployment_state", deployment=d,
                                                        state=s)]
        for d in ("good", "locked", "busy")
    }  # fmt: skip
    assert {"good": ["up"], "locked": ["down"], "busy": ["cooling"]} == states
    assert 3.0 == at("rrcli_deployment_cap", deployment="good")
    ok = [r for r in records if r["outcome"] == "ok"]
    assert len(ok) == at("rrcli_deployment_calls_total", deployment="good", outcome="ok") == 5
    assert 1 == at("rrcli_deployment_call_errors_total", deployment="locked", error_type="http_401")
    assert 1 == at("rrcli_deployment_call_errors_total", deployment="busy", error_type="http_429")
    for kind, field in (("input", "input_tokens"), ("output", "output_tokens")):
        assert sum(r[field] for r in ok) == at(f"rrcli_deployment_{kind}_tokens_total",
                                               deployment="good")  # fmt: skip
    spent = sum(r["cost_usd"] or 0.0 for r in records)
    assert spent == pytest.approx(at("rrcli_deployment_cost_usd_total", deployment="good"))
    assert 0 < spent == pytest.approx(at("rrcli_budget_spent_usd", pool="pool"))
    assert (5.0, 0.0) == (at("rrcli_budget_limit_usd", pool="pool"),
                          at("rrcli_budget_reserved_usd", pool="pool"))  # fmt: skip
    assert at("rrcli_deployment_sessions", deployment="good") >= 3
    assert 0 <= at("rrcli_deployment_admission_waits_total", deployment="good") <= 5
    assert at("rrcli_deployment_admission_wait_seconds_total", deployment="good") >= 0
    assert 2 == at("rrcli_serve_refused_total", api="openai", reason="unauthorized")
    assert 1 == at("rrcli_serve_refused_total", api="openai", reason="unknown_model")
    values = {v for (_, labels) in seen for (_, v) in labels}
    assert [] == [v for v in values if "secret" in v]


def test_answers_name_the_backends_model_and_jobs_have_one_id_form(tmp_path, sim_server):
    """A plain and a streamed answer both say the backend's model (as a direct call would),
    in OpenAI's and Anthropic's APIs; the trace's job ids are ``req_<n>`` whichever API the
    request came in."""
    sim = sim_server()
    served, traces = _serve(tmp_path, [_backend("b0", sim.openai_url, "m-real")])
    try:
        o, a = _sdks(served)
        plain = o.chat.completions.create(model="pool", messages=HI).model
        streamed = {
            c.model for c in o.chat.completions.create(model="pool", messages=HI, stream=True)
        }
        message = a.messages.create(model="pool", max_tokens=8, messages=HI).model
        with a.messages.stream(model="pool", max_tokens=8, messages=HI) as stream:
            final = stream.get_final_message().model
    finally:
        served.stop()
    assert ("m-real", {"m-real"}, "m-real", "m-real") == (plain, streamed, message, final)
    ids = [r["job_id"] for r in calls(traces)]
    assert 4 == len(ids) and all(type(i) is str and i.startswith("req_") for i in ids)
    assert 4 == len(set(ids))


def test_refused_requests_are_counted_and_the_first_of_each_kind_traced(tmp_path, sim_server):
    """Requests refused before any backend is asked (a wrong key, a body that is not a
    request, an unknown model), each sent twice: /metrics counts both of each, and the trace
    holds one ``refused`` record per reason, the first, with what the client was told, and
    ``rrcli stats`` reads the trace with no malformed line."""
    sim = sim_server()
    served, traces = _serve(tmp_path, [_backend("b0", sim.openai_url, "m-real")])
    url = served.url + "/v1/chat/completions"
    try:
        with httpx2.Client(timeout=30, headers={"x-api-key": KEY}) as client:
            for _ in range(2):
                client.post(url, json={"model": "pool"}, headers={"x-api-key": "wrong"})
                client.post(url, json={"model": "pool", "messages": "Hi"})
                client.post(url, json={"model": "nope", "messages": HI})
        seen = _scrape(served)
    finally:
        served.stop()
    counted = {
        dict(labels)["reason"]: value
        for (name, labels), value in seen.items()
        if name == "rrcli_serve_refused_total"
    }
    assert {"unauthorized": 2, "invalid_request": 2, "unknown_model": 2} == counted
    refused = [r for r in read_jsonl(traces) if r["event"] == "refused"]
    assert [
        ("unauthorized", 401),
        ("invalid_request", 400),
        ("unknown_model", 404),
    ] == [(r["reason"], r["status"]) for r in refused]
    assert "body.messages must be an array of messages, got string" == refused[1]["message"]
    stats = rrcli("stats", traces, "--json", cwd=tmp_path)
    assert (0, 0) == (stats.returncode, orjson.loads(stats.stdout)["malformed_lines"])


def test_the_made_client_key_is_shown_only_once_the_port_is_bound(tmp_path, sim_server):
    """Without a key variable, serve shows the key it made after the line saying where it
    listens, and that key is served; when the port cannot be bound it exits 2 saying so and
    shows no key."""
    sim = sim_server()
    path = write_profile(
        tmp_path / "pool.toml", [_backend("b0", sim.openai_url, "m-real")], name="pool"
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        failed = rrcli("serve", "-p", path, "--port", str(port), "-q", cwd=tmp_path)
    assert 2 == failed.returncode and "cannot listen" in failed.stderr
    assert "client key" not in failed.stdout + failed.stderr
    served = Served(path, tmp_path)
    try:
        assert served.proc.stdout is not None
        shown = served.proc.stdout.readline()
        key = shown.removeprefix("client key (shown once): ").strip()
        o = openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0)
        answered = o.chat.completions.create(model="pool", messages=HI)
    finally:
        served.stop()
    assert shown.startswith("client key (shown once): sk-rrcli-")
    assert answered.choices[0].message.content


def test_a_servers_own_error_types_are_one_label_and_never_reach_the_client(tmp_path, canned):
    """A backend answering 200 with an error object whose type is new at every request (and
    whose message names an inner address): each client gets a 502 naming the deployment, not
    the server's words; /metrics counts the failures under one ``other`` error type."""
    seen = itertools.count()

    def answer(request):
        kind = f"weird_type_{next(seen)}"
        body = {"error": {"type": kind, "message": "failed at 10.0.0.7:9999"}}
        return 200, {"content-type": "application/json"}, orjson.dumps(body)

    backends = [_backend("odd", canned(answer) + "/v1", "m-odd")]
    served, _ = _serve(tmp_path, backends, retry={"max_retries": 0})
    try:
        o, _ = _sdks(served)
        said = []
        for _ in range(4):
            with pytest.raises(openai.InternalServerError) as caught:
                o.chat.completions.create(model="m-odd", messages=HI)
            said.append(caught.value.response.text)
        seen_metrics = _scrape(served)
    finally:
        served.stop()
    assert all("upstream call failed at deployment `odd` (other)" in text for text in said)
    assert not any("10.0.0.7" in text or "weird_type" in text for text in said)
    kinds = {
        dict(labels)["error_type"]: value
        for (name, labels), value in seen_metrics.items()
        if name == "rrcli_deployment_call_errors_total"
    }
    assert {"other": 4} == kinds


def test_metrics_count_cache_aware_hits_and_admission_waits(tmp_path, sim_server):
    """With cache_aware, one long prompt sent four times goes where it is warm three times:
    /metrics counts three cache-aware hits, on the deployment the trace shows served them.
    Three requests at once to a backend of cap 1 whose answers take 0.3 s: two wait to be
    admitted, for 0.3 s or more between them."""
    a, b = sim_server(), sim_server(latency_ms=300)
    long = [{"role": "user", "content": "the same long question " * 80}]
    backends = [
        _backend("a", a.openai_url, "m-warm"),
        _backend("a2", a.openai_url, "m-warm"),
        _backend("slow", b.openai_url, "m-slow", max_concurrency=1),
    ]
    served, traces = _serve(tmp_path, backends, strategy="cache_aware")
    try:
        o, _ = _sdks(served)
        for _ in range(4):
            o.chat.completions.create(model="m-warm", messages=long)
        threads = [
            threading.Thread(target=lambda: o.chat.completions.create(model="m-slow", messages=HI))
            for _ in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        seen = _scrape(served)
    finally:
        served.stop()
    served_by = [r["deployment"] for r in calls(traces) if r["model"] == "m-warm"]
    hits = {
        dict(labels)["deployment"]: value
        for (name, labels), value in seen.items()
        if name == "rrcli_deployment_cache_aware_hits_total" and value
    }
    assert {served_by[1]: 3} == hits and len(set(served_by[1:4])) == 1
    waits = ("rrcli_deployment_admission_waits_total", (("deployment", "slow"),))
    waited = ("rrcli_deployment_admission_wait_seconds_total", (("deployment", "slow"),))
    assert 2 == seen[waits] and seen[waited] >= 0.3
