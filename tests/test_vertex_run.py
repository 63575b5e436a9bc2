"""``rrcli run`` on vertex backends, against ``rrcli sim`` speaking Vertex AI's wire (the same
sim google-genai and AnthropicVertex are held to in test_vertex_sdk.py): a Gemini and a Claude
model in one pool with jobs of both client APIs, plain and streamed; ``RESOURCE_EXHAUSTED``
retried; a token found by google-auth (a service account whose token endpoint is the sim's)
and never written; the profile's checks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
import pytest
from runkit import calls, read_jsonl, rrcli, write_profile

from rrcli.config.load import validate_profile

TOKEN = "ya29.vertex-run-token-0123456789abcdef"
ENV = {"RR_TEST_VERTEX_TOKEN": TOKEN, "GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent.json"}
PROJECT, REGION = "my-project-1", "us-east5"
CLAUDE = "claude-3-5-haiku@20241022"
OPENAI_JOB = {
    "id": "o1",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
    ],
    "params": {"max_tokens": 20, "temperature": 0.5},
}
ANTHROPIC_JOB = {
    "custom_id": "a1",
    "params": {
        "model": "claude",
        "max_tokens": 20,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hello"}],
    },
}


def vertex(sim, model: str, **extra) -> dict:
    """A vertex backend of ``model`` at ``sim``, its token from the environment."""
    return {
        "id": model.partition("-")[0],
        "provider": "vertex",
        "model": model,
        "project": PROJECT,
        "region": REGION,
        "base_url": sim.url,
        "credentials": {"token_env": "RR_TEST_VERTEX_TOKEN"},
        **extra,
    }


def run(tmp_path: Path, backends, jobs, *args: str, env=None, name: str = "jobs"):
    """``rrcli run`` of ``jobs`` with traces: (process, results by id, trace path)."""
    profile = write_profile(tmp_path / f"{name}.toml", backends)
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(j) + b"\n" for j in jobs))
    traces = tmp_path / f"{name}.traces.jsonl"
    done = rrcli(
        "run", path, "-p", profile, "--traces", traces, *args, cwd=tmp_path, env=env or ENV
    )
    lines = read_jsonl(tmp_path / f"{name}.results.jsonl")
    return done, {r.get("id") or r.get("custom_id"): r for r in lines}, traces


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_gemini_and_claude_models_answer_jobs_of_both_apis(tmp_path, sim_server, stream):
    """A Gemini backend and a Claude backend on one project: each answers an OpenAI-shaped and
    an Anthropic-shaped job at its publisher's path (a Claude body without model, with Vertex's
    anthropic_version), with the bearer token, plain and streamed."""
    sim = sim_server(api_keys=(TOKEN,))
    for model in ("gemini-2.5-flash", CLAUDE):
        args = ["--concurrency", "1", *(["--stream"] if stream else [])]
        name = f"{model[:6]}-{stream}"
        done, results, _ = run(
            tmp_path, [vertex(sim, model)], [OPENAI_JOB, ANTHROPIC_JOB], *args, name=name
        )
        assert 0 == done.returncode, done.stderr
        assert ["ok", "ok"] == [results["o1"]["status"], results["a1"]["status"]]
    gemini = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/gemini-2.5-flash"
    claude = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{CLAUDE}"
    methods = (
        ("streamGenerateContent", "streamRawPredict")
        if stream
        else ("generateContent", "rawPredict")
    )
    seen = sim.received()
    assert [f"{gemini}:{methods[0]}"] * 2 + [f"{claude}:{methods[1]}"] * 2 == [
        r["path"] for r in seen
    ]
    assert "Be brief." == seen[0]["body"]["systemInstruction"]["parts"][0]["text"]
    claude_body = seen[2]["body"]
    assert ("vertex-2023-10-16", False) == (
        claude_body["anthropic_version"],
        "model" in claude_body,
    )
    assert {"authorization:" + fingerprint(TOKEN): 4} == sim.stats()["credentials"]


def fingerprint(key: str) -> str:
    from rrcli.sim.behaviour import key_fingerprint

    return key_fingerprint(key)


def test_resource_exhausted_is_retried_on_its_backend(tmp_path, sim_server):
    """A 429 RESOURCE_EXHAUSTED (Google's document, its wait in RetryInfo) is a rate limit:
    the call is tried again after the wait RetryInfo gives, and answered."""
    limited = {"headers": {"x-sim-status": "429", "x-sim-times": "1"}}
    for model in ("gemini-2.5-flash", CLAUDE):
        sim = sim_server(api_keys=(TOKEN,), retry_after_ms=10)
        done, results, traces = run(
            tmp_path, [vertex(sim, model, **limited)], [OPENAI_JOB], name=model[:6]
        )
        assert 0 == done.returncode, done.stderr
        assert "ok" == results["o1"]["status"]
        attempts = calls(traces)
        assert [("retry", 429, 10.0), ("ok", 200, None)] == [
            (a["outcome"], a["http_status"], a["retry_after_ms"]) for a in attempts
        ]


def service_account(tmp_path: Path, sim) -> Path:
    """A service account's credentials JSON whose token endpoint is the sim's ``/token``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path = tmp_path / "service-account.json"
    info = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": f"rrcli-test@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"{sim.url}/token",
    }
    path.write_text(json.dumps(info))
    return path


@pytest.mark.parametrize("where", ["adc", "file"])
def test_google_auth_finds_the_token_and_no_record_shows_it(tmp_path, sim_server, where):
    """No token given: google-auth signs a JWT for the service account (by
    GOOGLE_APPLICATION_CREDENTIALS, or credentials.file), trades it at the token endpoint
    once for both calls, and the token it gets is sent as the bearer; the token is in no
    result, trace or log line."""
    pytest.importorskip("google.auth")
    sim = sim_server(api_keys=(TOKEN,))
    account = service_account(tmp_path, sim)
    backend = vertex(sim, "gemini-2.5-flash")
    del backend["credentials"]
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(account)}
    if where == "file":
        backend["credentials"] = {"file": str(account)}
        env = {"GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent.json"}
    second = {**OPENAI_JOB, "id": "o2"}
    done, results, traces = run(
        tmp_path, [backend], [OPENAI_JOB, second], "--stream", "-v", env=env
    )
    assert 0 == done.returncode, done.stderr
    assert ["ok", "ok"] == [results["o1"]["status"], results["o2"]["status"]]
    paths = [r["path"] for r in sim.received()]
    assert 1 == paths.count("/token")
    assert {"authorization:" + fingerprint(TOKEN): 2} == sim.stats()["credentials"]
    written = done.stderr + traces.read_text() + (tmp_path / "jobs.results.jsonl").read_text()
    assert TOKEN not in written


def test_a_token_about_to_expire_is_fetched_again(tmp_path, sim_server, monkeypatch):
    """Tokens the endpoint says last a minute (within the five minutes before expiry when
    rrcli refreshes): google-auth is asked for a new one before each call."""
    pytest.importorskip("google.auth")
    from rrcli.sim import vertex as sim_vertex

    monkeypatch.setattr(sim_vertex, "TOKEN_LIFE", 60)  # the sim's, in this process
    sim = sim_server(api_keys=(TOKEN,))
    backend = vertex(sim, CLAUDE)
    backend["credentials"] = {"file": str(service_account(tmp_path, sim))}
    second = {**OPENAI_JOB, "id": "o2"}
    done, results, _ = run(tmp_path, [backend], [OPENAI_JOB, second], "--concurrency", "1")
    assert 0 == done.returncode, done.stderr
    assert ["ok", "ok"] == [results["o1"]["status"], results["o2"]["status"]]
    paths = [r["path"] for r in sim.received()]
    assert ["/token", "rawPredict", "/token", "rawPredict"] == [
        p if p == "/token" else p.rpartition(":")[2] for p in paths
    ]


def test_a_server_echoing_the_found_token_gets_it_into_no_output(tmp_path, sim_server):
    """A token google-auth found (known to no profile) that a server echoes in its error is
    masked in the result, the traces and the log."""
    pytest.importorskip("google.auth")
    sim = sim_server(api_keys=(TOKEN,))
    echo = {"x-sim-status": "400", "x-sim-error-message": f"bad request from {TOKEN}"}
    backend = vertex(sim, CLAUDE, headers=echo)
    backend["credentials"] = {"file": str(service_account(tmp_path, sim))}
    done, results, traces = run(tmp_path, [backend], [OPENAI_JOB], "-v")
    assert "error" == results["o1"]["status"]
    assert "bad request from ***" in results["o1"]["error"]["message"]
    written = done.stderr + traces.read_text() + (tmp_path / "jobs.results.jsonl").read_text()
    assert TOKEN not in written


def test_an_unknown_token_takes_the_backend_down(tmp_path, sim_server):
    """A token Vertex AI does not take (401 UNAUTHENTICATED) is not retried: the job fails
    naming the status, and the token is not written."""
    sim = sim_server(api_keys=("ya29.another-token-entirely",))
    done, results, traces = run(tmp_path, [vertex(sim, "gemini-2.5-flash")], [OPENAI_JOB])
    assert 0 != done.returncode
    assert "error" == results["o1"]["status"]
    assert "UNAUTHENTICATED" in results["o1"]["error"]["message"]
    assert 1 == len(calls(traces))
    assert TOKEN not in done.stderr + traces.read_text()


def test_permission_denied_takes_the_backend_down(tmp_path, sim_server):
    """A 403 PERMISSION_DENIED (the API not enabled, no role on the project) is the backend's
    fault, not the call's: not retried, and the run says no healthy backend is left."""
    sim = sim_server(api_keys=(TOKEN,))
    denied = {"x-sim-status": "403", "x-sim-error-type": "PERMISSION_DENIED"}
    backend = vertex(sim, "gemini-2.5-flash", headers=denied)
    done, results, traces = run(tmp_path, [backend], [OPENAI_JOB])
    assert "error" == results["o1"]["status"]
    assert "HTTP 403 PERMISSION_DENIED" in results["o1"]["error"]["message"]
    assert 1 == len(calls(traces))
    assert "no healthy backend left" in done.stderr


def test_validate_names_what_a_vertex_backend_lacks(tmp_path):
    """No project, no region, a key: each an error naming the field and the fix; the region's
    endpoint is the default base_url, "global" the global one."""
    bad = {"id": "v", "provider": "vertex", "credentials": {"api_key_env": "X_KEY"}}
    good = {"id": "g", "provider": "vertex", "project": PROJECT, "region": "global"}
    regional = {**good, "id": "r", "region": "europe-west4"}
    path = write_profile(tmp_path / "bad.toml", [bad])
    report = validate_profile(path, environ={})
    found = {(d.path, d.code) for d in report.diagnostics if d.severity == "error"}
    assert {
        ("backends[0].project", "project_missing"),
        ("backends[0].region", "region_missing"),
        ("backends[0].credentials.api_key_env", "credentials_conflict"),
    } == found
    report = validate_profile(write_profile(tmp_path / "good.toml", [good, regional]), environ={})
    urls = {b.id: b.base_url for b in report.profile.backends}
    assert {
        "g": "https://aiplatform.googleapis.com",
        "r": "https://europe-west4-aiplatform.googleapis.com",
    } == urls


def test_validate_probe_sends_a_tiny_call_to_each_publisher(tmp_path, sim_server):
    """`validate --probe`: one tiny call each to a Gemini and a Claude backend, ok; with a
    token Vertex AI does not take, FAILED naming UNAUTHENTICATED; the token never printed."""
    sim = sim_server(api_keys=(TOKEN,))
    backends = [vertex(sim, "gemini-2.5-flash"), vertex(sim, CLAUDE)]
    profile = write_profile(tmp_path / "p.toml", backends)
    outcomes = []
    for token in (TOKEN, "ya29.not-this-one-0123456789"):
        env = {**ENV, "RR_TEST_VERTEX_TOKEN": token}
        done = rrcli("validate", "--probe", profile, cwd=tmp_path, env=env)
        probes = sorted(ln for ln in done.stdout.splitlines() if ln.startswith("probe:"))
        outcomes.append([(ln.split()[1], "ok in" in ln, "UNAUTHENTICATED" in ln) for ln in probes])
        assert token not in done.stdout + done.stderr
    assert [("claude:", True, False), ("gemini:", True, False)] == outcomes[0]
    assert [("claude:", False, True), ("gemini:", False, True)] == outcomes[1]


def test_the_router_keeps_from_a_claude_model_what_messages_cannot_say():
    """A vertex backend speaks its model's publisher's API: a Claude model takes an Anthropic
    job's top_k but not n = 2 (Anthropic's Messages), a Gemini model takes n = 2; a
    refusal names Anthropic's API for the Claude one."""
    from rrcli.config.profile import Backend
    from rrcli.routing.eligibility import eligible_backends

    claude = Backend(id="c", provider="vertex", model=CLAUDE)
    gemini = Backend(id="g", provider="vertex", model="gemini-2.5-flash")
    ids, reasons = eligible_backends({"n": 2}, "openai", [claude, gemini])
    assert ("g",) == ids
    said = "n = 2 cannot be sent to vertex backend c: Anthropic's Messages API cannot express it"
    assert [said] == list(reasons)
    assert (("c",), ()) == eligible_backends({"top_k": 3}, "anthropic", [claude])


def test_validate_says_to_install_the_extra(tmp_path, monkeypatch):
    """Without google-auth, a vertex backend finding its token by it is an error saying to
    pip install 'rrcli[vertex]'; one given its token by token_env needs no extra."""
    monkeypatch.setitem(sys.modules, "google.auth", None)
    adc = {"id": "a", "provider": "vertex", "project": PROJECT, "region": REGION}
    given = {**adc, "id": "t", "credentials": {"token_env": "RR_TEST_VERTEX_TOKEN"}}
    report = validate_profile(write_profile(tmp_path / "p.toml", [adc, given]), environ=ENV)
    assert [("backends[0].provider", "extra_missing")] == [(d.path, d.code) for d in report.errors]
    assert "pip install 'rrcli[vertex]'" in report.errors[0].fix


def test_prices_come_from_genai_prices():
    """Both publishers' models on Vertex AI are priced by genai-prices (its google-vertex
    provider), whatever the base_url (a proxy's here)."""
    from rrcli.config.prices import lookup_price

    url = "https://vertex-proxy.example.com"
    gemini = lookup_price("vertex", url, "gemini-2.5-flash")
    claude = lookup_price("vertex", url, CLAUDE)
    assert (0.3, 2.5) == (gemini.input, gemini.output)
    assert (0.8, 4.0) == (claude.input, claude.output)
