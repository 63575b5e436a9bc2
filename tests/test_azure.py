"""Azure OpenAI: the official ``openai.AzureOpenAI`` client proves ``rrcli sim`` speaks Azure's
wire, then rrcli's azure provider runs against the same sim (deployments and the v1 API, the
``api-key`` header or a bearer token, content filter refusals, no-capacity 429s, rate-limit
headers), and the key never reaches a URL, a log line, a trace or a result."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import openai
import pytest
from hostile import chat
from runkit import read_jsonl, rrcli, write_jobs
from simkit import post

from rrcli.config.load import validate_profile
from rrcli.config.profile import Backend, Credentials, RetrySettings
from rrcli.errors import ProviderError
from rrcli.providers import make_provider
from rrcli.providers.base import Call, Reply
from rrcli.sim.behaviour import key_fingerprint

KEY = "azk-5f0e1d2c3b4a69788796a5b4c3d2e1f0"
VERSION = "2024-10-21"
USER = [{"role": "user", "content": "Hello there"}]


def azure_client(server, key: str = KEY) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(
        azure_endpoint=server.url, api_key=key, api_version=VERSION, max_retries=0
    )


def test_the_official_azure_client_is_answered_as_azure_answers(sim_server) -> None:
    """AzureOpenAI's chat (plain and streamed), embeddings and responses reach the
    deployment's paths with the api-version in the query and the key in ``api-key``, and read
    the sim's answers; a wrong key is a 401 in Azure's words."""
    server = sim_server(api_keys=[KEY], model="gpt-4o-mini")
    client = azure_client(server)
    plain = client.chat.completions.create(model="east", messages=USER)
    streamed = client.chat.completions.create(
        model="east", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    vectors = client.embeddings.create(model="emb", input=["a", "b"])
    answer = client.responses.create(model="gpt-4o-mini", input="hi")
    with pytest.raises(openai.AuthenticationError) as refused:
        azure_client(server, "azk-wrong-key-0000000000").chat.completions.create(
            model="east", messages=USER
        )
    seen = [(r["path"], r["query"]) for r in server.received()]
    assert (plain.choices[0].message.content, "stop") == (text, plain.choices[0].finish_reason)
    assert (2, True) == (len(vectors.data), bool(answer.output_text))
    assert "401" == refused.value.code
    assert [
        ("/openai/deployments/east/chat/completions", f"api-version={VERSION}"),
        ("/openai/deployments/east/chat/completions", f"api-version={VERSION}"),
        ("/openai/deployments/emb/embeddings", f"api-version={VERSION}"),
        ("/openai/responses", f"api-version={VERSION}"),
        ("/openai/deployments/east/chat/completions", f"api-version={VERSION}"),
    ] == seen
    assert 4 == server.stats()["credentials"][f"api-key:{key_fingerprint(KEY)}"]


def test_the_sim_refuses_what_azure_refuses(sim_server) -> None:
    """A deployment's path without api-version is Azure's 404 ``Resource not found``; the v1
    API with a dated api-version is a 400; the content filter's refusal is a 400
    ``content_filter`` whose innererror names the category; a region out of capacity is a
    429 ``NoCapacity`` with retry-after-ms; the v1 API takes a bearer token."""
    server = sim_server(api_keys=[KEY])
    client = azure_client(server)
    missing = post(
        f"{server.url}/openai/deployments/east/chat/completions",
        {"messages": USER},
        {"api-key": KEY},
    )
    dated = post(
        f"{server.url}/openai/v1/chat/completions?api-version={VERSION}",
        {"model": "m", "messages": USER},
        {"api-key": KEY},
    )
    with pytest.raises(openai.BadRequestError) as filtered:
        client.chat.completions.create(
            model="east", messages=USER, extra_headers={"x-sim-mode": "content-filter"}
        )
    with pytest.raises(openai.RateLimitError) as busy:
        client.chat.completions.create(
            model="east",
            messages=USER,
            extra_headers={"x-sim-status": "429", "x-sim-error-code": "NoCapacity"},
        )
    v1 = openai.OpenAI(base_url=f"{server.url}/openai/v1/", api_key=KEY, max_retries=0)
    inner = filtered.value.body["innererror"]["content_filter_result"]
    assert (404, {"error": {"code": "404", "message": "Resource not found"}}) == (
        missing.status_code,
        missing.json(),
    )
    assert (400, "API version not supported") == (
        dated.status_code,
        dated.json()["error"]["message"],
    )
    assert ("content_filter", True) == (filtered.value.code, inner["hate"]["filtered"])
    assert ("NoCapacity", "100") == (busy.value.code, busy.value.response.headers["retry-after-ms"])
    assert v1.chat.completions.create(model="m", messages=USER).choices[0].message.content


def write_azure_profile(path: Path, server, *backends: dict) -> Path:
    import tomli_w

    entries = [
        {"provider": "azure", "base_url": server.url, "model": "gpt-4o-mini", "allow_private": True}
        | b
        for b in backends
    ]
    retry = {"backoff_initial": 0.01, "backoff_max": 0.05}
    path.write_text(tomli_w.dumps({"retry": retry, "backends": entries}))
    return path


def test_rrcli_runs_deployments_and_the_v1_api_and_the_key_goes_nowhere(
    sim_server, tmp_path
) -> None:
    """A pool of a deployment (key in ``api-key``, api-version in the query) and the v1 API (a
    bearer token from token_env, no api-version) serves every job, priced by genai-prices
    from the backend's model; the key is in no URL the server saw, no trace, no result and no
    log line of a verbose run."""
    server = sim_server(api_keys=[KEY], model="gpt-4o-mini")
    profile = write_azure_profile(
        tmp_path / "azure.toml",
        server,
        {"id": "east", "deployment": "gpt4o-east", "credentials": {"api_key_env": "AZ_KEY"}},
        {"id": "v1", "base_url": f"{server.url}/openai/v1", "credentials": {"token_env": "AZ_TOK"}},
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 6)
    done = rrcli(
        "run", jobs, "-p", profile, "--traces", tmp_path / "t.jsonl", "-v",
        cwd=tmp_path, env={"AZ_KEY": KEY, "AZ_TOK": KEY},
    )  # fmt: skip
    assert 0 == done.returncode, done.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    calls = [r for r in read_jsonl(tmp_path / "t.jsonl") if r["event"] == "call"]
    seen = {(r["path"], r["query"]) for r in server.received()}
    assert {"ok"} == {r["status"] for r in results}
    assert {
        ("/openai/deployments/gpt4o-east/chat/completions", f"api-version={VERSION}"),
        ("/openai/v1/chat/completions", ""),
    } == seen
    assert all(c["cost_usd"] > 0 for c in calls)
    assert {f"api-key:{key_fingerprint(KEY)}": 3, f"authorization:{key_fingerprint(KEY)}": 3} == (
        server.stats()["credentials"]
    )
    written = [
        done.stdout,
        done.stderr,
        (tmp_path / "t.jsonl").read_text(),
        (tmp_path / "jobs.results.jsonl").read_text(),
        *(f"{r['path']}?{r['query']}" for r in server.received()),
    ]
    assert [] == [w for w in written if KEY in w or KEY[:12] in w]


@pytest.mark.parametrize(
    ("mode", "stream", "said"),
    [
        ("content-filter", False, "the prompt: category hate (high)"),
        ("content-filter-answer", False, "the answer: category violence (high)"),
        ("content-filter-answer", True, "the answer: category violence (high)"),
    ],
)
def test_a_content_filter_refusal_is_not_retried_and_names_the_category(
    sim_server, tmp_path, mode, stream, said
) -> None:
    """A prompt the filter refuses (400 ``content_filter``) and an answer it cut (200, finish
    reason ``content_filter``, plain or streamed) end the job at its first attempt with an
    error of type ``content_filter`` that names the category."""
    server = sim_server(api_keys=[KEY])
    profile = write_azure_profile(
        tmp_path / "azure.toml",
        server,
        {
            "id": "east",
            "deployment": "d",
            "credentials": {"api_key_env": "AZ_KEY"},
            "headers": {"x-sim-mode": mode},
        },
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    flags = ["--stream"] if stream else []
    rrcli("run", jobs, "-p", profile, *flags, cwd=tmp_path, env={"AZ_KEY": KEY})
    (result,) = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ("error", "content_filter", 1) == (
        result["status"],
        result["error"]["type"],
        result["attempts"],
    )
    assert said in result["error"]["message"]
    assert 1 == server.stats()["requests"]


def test_no_capacity_is_retried(sim_server, tmp_path) -> None:
    """Azure's 429 ``NoCapacity`` (the region has no room now) is retried on the backend after
    its retry-after-ms, and the job succeeds."""
    server = sim_server(api_keys=[KEY])
    profile = write_azure_profile(
        tmp_path / "azure.toml",
        server,
        {
            "id": "east",
            "deployment": "d",
            "credentials": {"api_key_env": "AZ_KEY"},
            "headers": {
                "x-sim-status": "429",
                "x-sim-error-code": "NoCapacity",
                "x-sim-times": "1",
            },
        },
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    done = rrcli("run", jobs, "-p", profile, cwd=tmp_path, env={"AZ_KEY": KEY})
    (result,) = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ("ok", 2) == (result["status"], result["attempts"]), done.stderr


def send(backend: Backend, call: Call, key: str | None) -> Reply:
    async def go() -> Reply:
        provider = make_provider(backend, key, retry=RetrySettings(), seed=None)
        try:
            return await provider.send(call)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def test_azures_spent_budget_headers_pause_the_backend(sim_server) -> None:
    """Azure says a budget is spent with ``x-ratelimit-remaining-requests: 0`` and no reset:
    the reply asks the gate to pause the backend for Azure's shortest window."""
    server = sim_server()
    backend = Backend(
        id="east",
        provider="azure",
        base_url=server.url,
        deployment="d",
        api_version=VERSION,
        allow_private=True,
        headers={"x-sim-ratelimit": "requests=500"},
    )
    plain = Backend(id="west", provider="azure", base_url=server.url, allow_private=True)
    assert 1.0 == send(backend, Call(messages=USER), KEY).pause_s
    assert None is send(plain, Call(messages=USER), KEY).pause_s


TOKEN_SCRIPT = """
import json, pathlib, sys
runs = pathlib.Path(sys.argv[1])
n = len(runs.read_text()) if runs.exists() else 0
runs.write_text("x" * (n + 1))
print(json.dumps({"accessToken": f"entra-token-{n:04d}-abcdefghijkl", "expires_in": 0}))
"""


def test_a_token_command_is_run_again_when_its_token_expires(sim_server, tmp_path) -> None:
    """``credentials.token_command``'s token goes as a bearer token, never in ``api-key``; a
    token already expired is asked for again before the next call, so each call carries a
    new one."""
    server = sim_server()
    script = tmp_path / "token.py"
    script.write_text(TOKEN_SCRIPT)
    runs = tmp_path / "runs"
    command = f"{sys.executable} {script} {runs}"
    backend = Backend(
        id="east",
        provider="azure",
        base_url=server.url,
        deployment="d",
        api_version=VERSION,
        allow_private=True,
        credentials=Credentials(token_command=command),
    )

    async def two_calls() -> None:
        provider = make_provider(backend, None, retry=RetrySettings(), seed=None)
        try:
            await provider.send(Call(messages=USER))
            await provider.send(Call(messages=USER))
        finally:
            await provider.aclose()

    asyncio.run(two_calls())
    expected = {
        f"authorization:{key_fingerprint(f'entra-token-{n:04d}-abcdefghijkl')}": 1 for n in (0, 1)
    }
    assert expected == server.stats()["credentials"]


def test_a_failing_token_command_is_an_error_that_says_what_to_do(sim_server, tmp_path) -> None:
    """A token command that fails is a ``token_command`` error naming the command and its last
    line of stderr, not retried; nothing is sent. A password given to the command as an
    option's value is masked where its stderr repeats it."""
    server = sim_server()
    said = "import sys; sys.exit('not logged in with ' + sys.argv[-1])"
    backend = Backend(
        id="east",
        provider="azure",
        base_url=server.url,
        allow_private=True,
        credentials=Credentials(
            token_command=f'{sys.executable} -c "{said}" --password hunter2-pass'
        ),
    )
    with pytest.raises(ProviderError) as failed:
        send(backend, Call(messages=USER), None)
    assert ("token_command", False) == (failed.value.type, failed.value.transient)
    assert "not logged in with ***" in failed.value.message
    assert 0 == server.stats()["requests"]


def test_a_profile_written_whole_keeps_its_token_command(tmp_path) -> None:
    """The masked command is for printing only: a profile written unredacted (as ``rrcli``
    writes one it means to read again) keeps the command as given."""
    import tomli_w

    from rrcli.config.profile import profile_to_dict

    command = "get-token --password hunter2-pass"
    backend = {
        "id": "az",
        "provider": "azure",
        "base_url": "http://127.0.0.1:9",
        "allow_private": True,
        "deployment": "d",
        "credentials": {"token_command": command},
    }
    first, again = tmp_path / "first.toml", tmp_path / "again.toml"
    first.write_text(tomli_w.dumps({"backends": [backend]}))
    written = profile_to_dict(validate_profile(first).profile, redact=False)
    again.write_text(tomli_w.dumps(written))
    assert command == validate_profile(again).profile.backends[0].credentials.token_command


@pytest.mark.parametrize(
    ("backend", "where", "code"),
    [
        (
            'provider = "azure"\ncredentials = { api_key_env = "K" }\n',
            "backends[0].base_url",
            "azure_base_url",
        ),
        (
            'provider = "openai"\ncredentials = { token_env = "K" }\n',
            "backends[0].credentials.token_env",
            "token_not_taken",
        ),
        (
            'provider = "azure"\nbase_url = "https://r.openai.azure.com"\n'
            'credentials = { api_key_env = "K", token_command = "az account get-access-token" }\n',
            "backends[0].credentials",
            "credentials_conflict",
        ),
    ],
)
def test_validate_names_the_azure_key_at_fault_and_the_fix(tmp_path, backend, where, code) -> None:
    """An azure backend without its resource's base_url, a bearer token on another provider and
    a key beside a token command are errors naming the key, with a fix."""
    path = tmp_path / "p.toml"
    path.write_text(f'[[backends]]\nid = "a"\n{backend}')
    report = validate_profile(path, environ={"K": "k-0123456789abcdef"})
    found = [e for e in report.errors if e.code == code]
    assert [where] == [e.path for e in found]
    assert found[0].fix


def test_api_version_without_a_deployment_is_a_warning(tmp_path) -> None:
    """api_version goes with a deployment: on the v1 API it is ignored, and validate says so."""
    path = tmp_path / "p.toml"
    path.write_text(
        '[[backends]]\nid = "a"\nprovider = "azure"\nbase_url = "https://r.openai.azure.com"\n'
        'api_version = "2024-10-21"\ncredentials = { api_key_env = "K" }\n'
    )
    report = validate_profile(path, environ={"K": "k-0123456789abcdef"})
    assert ["backends[0].api_version"] == [
        w.path for w in report.warnings if w.code == "ignored_key"
    ]


@pytest.mark.parametrize(
    ("credentials", "env", "auth"),
    [
        ({"api_key_env": "AZ_KEY"}, {"AZ_KEY": KEY}, ("api-key", KEY)),
        ({"token_env": "AZ_TOK"}, {"AZ_TOK": KEY}, ("authorization", f"Bearer {KEY}")),
    ],
)
def test_a_header_named_in_another_case_is_sent_once(
    hostile_server, tmp_path, credentials, env, auth
) -> None:
    """Header names are one name in any case: a profile's ``Api-Key`` and ``Content-Type``
    beside the backend's own credential and JSON body are not sent a second time; the
    backend's credential and content type are what goes, the profile's other headers as
    written."""
    server = hostile_server(lambda _: chat())
    profile = write_azure_profile(
        tmp_path / "azure.toml",
        server,
        {
            "id": "east",
            "deployment": "d",
            "credentials": credentials,
            "headers": {"Api-Key": "from-the-profile", "Content-Type": "text/plain", "X-Team": "a"},
        },
    )
    done = rrcli("run", "--prompt", "hi", "-p", profile, cwd=tmp_path, env=env)
    assert 0 == done.returncode, done.stderr
    (request,) = server.requests
    names = [name.lower() for name, _ in request.lines]
    assert len(names) == len(set(names)), request.lines
    assert auth[1] == request.headers[auth[0]]
    assert ("application/json", "a") == (request.headers["content-type"], request.headers["x-team"])
    assert "from-the-profile" not in str(request.lines)
