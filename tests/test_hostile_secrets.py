"""Keys go nowhere, whatever the server says (docs/reliability.md).

A loopback server (tests/hostile.py) sends the key it received back in every string it can: its
error type, message and code, a text body cut where a key would straddle the cut, JSON-escaped
and URL-encoded spellings, the model, the request id, the answer, an SSE error event. Not one
spelling reaches a result, a trace, the terminal or ``validate``'s output.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest
from hostile import Canned, chat
from runkit import read_jsonl, rrcli, write_profile

KEY = "sk-hostile-0123456789abcdefXYZ"
ENV = {"HOSTILE_KEY": KEY + "\r\n"}  # as a .env file leaves it
ESCAPED = "".join(f"\\u{ord(c):04x}" for c in KEY)
VARIABLE_KEY = "AbC9xYz012qWeRtY7uIoP3mN"  # a key written where a variable's name belongs


def _percent(key: str) -> list[str]:
    """``key`` URL-escaped where no encoder would: its first letter (``%73k-…``), its dashes
    (``%2d``), every character."""
    every = "".join(f"%{ord(c):02X}" for c in key)
    return [f"%{ord(key[0]):02x}" + key[1:], key.replace("-", "%2d"), every]


PERCENT = _percent(KEY)
SPELLINGS = [KEY, KEY[:10], ESCAPED[:30], quote(KEY, safe=""), *PERCENT]


def _json(status: int, body: bytes, headers: dict[str, str] | None = None) -> Canned:
    return Canned(status, {"content-type": "application/json", **(headers or {})}, body)


def attack(kind: str, key: str) -> Canned:
    """The answer echoing ``key`` in the way ``kind`` names."""
    if kind == "type":
        return _json(400, orjson.dumps({"error": {"message": key, "type": key, "code": key}}))
    if kind == "cut":  # the key straddles the 300th character of a text body
        return Canned(500, {"content-type": "text/plain"}, ("x" * 290 + key + "y" * 40).encode())
    if kind == "escaped":
        body = '{"error": {"message": "' + ESCAPED + '", "type": "' + ESCAPED + '"}}'
        return _json(400, body.encode())
    if kind == "url":
        return _json(400, orjson.dumps({"error": {"message": f"see ?key={quote(key, safe='')}"}}))
    if kind == "percent":
        spelt = _percent(key)
        message = {"message": f"bad key {spelt[0]} ({spelt[1]})", "type": spelt[2]}
        return _json(400, orjson.dumps({"error": message}))
    if kind == "sse":
        event = orjson.dumps({"error": {"type": key, "message": f"bad key {key}"}})
        return Canned(200, {"content-type": "text/event-stream"}, b"data: " + event + b"\n\n")
    body = {
        "id": key,
        "model": key,
        "system_fingerprint": quote(key, safe=""),
        "choices": [{"index": 0, "message": {"content": f"your key: {key}"}, "finish_reason": key}],
    }
    return _json(200, orjson.dumps(body), {"x-request-id": key})


KINDS = ["type", "cut", "escaped", "url", "percent", "sse", "reply"]


def echoing(request) -> Canned:
    """Reads the key from the request's header, the attack from the prompt."""
    key = request.headers["authorization"].removeprefix("Bearer ")
    return attack(request.json()["messages"][-1]["content"], key)


def profile_for(tmp_path: Path, server, **backend) -> Path:
    entry = {
        "id": "h",
        "base_url": server.openai_url,
        "credentials": {"api_key_env": "HOSTILE_KEY"},
    }
    return write_profile(tmp_path / "p.toml", [{**entry, **backend}], retry={"max_retries": 0})


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert [] == [s for s in SPELLINGS if s in text]


def strings(value) -> list[str]:
    """Every string of a JSON value, keys of objects too."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def test_a_server_echoing_the_key_everywhere_gets_it_into_no_output(tmp_path, hostile_server):
    """A key with a trailing CR LF in its variable is sent stripped (the run warns, naming the
    variable, never the value); the server sends it back as the error type, message and code, in
    a text body cut at 300 characters, JSON-escaped, URL-encoded (as an encoder writes it, and
    escaped where no encoder would: ``%73k-…``, ``%2d`` for each dash, every character), in an
    SSE error event, as the model, the request id and the answer: results (with the response
    kept), traces, stdout and stderr hold none of those spellings, nor the key's first ten
    characters."""
    server = hostile_server(echoing)
    profile = profile_for(tmp_path, server)
    jobs = tmp_path / "jobs.jsonl"
    lines = [
        {"id": kind, "prompt": kind, **({"params": {"stream": True}} if kind == "sse" else {})}
        for kind in KINDS
    ]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    result = rrcli("run", jobs, "-p", profile, "--keep-response", cwd=tmp_path, env=ENV)
    assert 1 == result.returncode, result.stderr
    assert {f"Bearer {KEY}"} == {r.headers["authorization"] for r in server.requests}
    assert "HOSTILE_KEY" in result.stderr and "whitespace" in result.stderr
    results = (tmp_path / "jobs.results.jsonl").read_text()
    traces = (tmp_path / "jobs.traces.jsonl").read_text()
    records = read_jsonl(tmp_path / "jobs.results.jsonl") + read_jsonl(
        tmp_path / "jobs.traces.jsonl"
    )
    assert_no_key(results, traces, result.stdout, result.stderr, *strings(records))
    by_id = {r["id"]: r for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert "ok" == by_id["reply"]["status"]
    assert "your key: ***" == by_id["reply"]["output"]
    assert ("***", "***") == (by_id["reply"]["request_id"], by_id["sse"]["error"]["type"])


def test_probe_never_shows_a_key(tmp_path, hostile_server):
    """``validate --probe`` against a server answering 401 with the key in its message, and
    against one naming the key as its model: neither output shows the key."""
    for answer in (attack("type", KEY), attack("reply", KEY)):
        server = hostile_server(lambda _, a=answer: a)
        profile = profile_for(tmp_path, server)
        result = rrcli("validate", profile, "--probe", cwd=tmp_path, env=ENV)
        assert 1 == len(server.requests)
        assert_no_key(result.stdout, result.stderr)


def test_validate_json_masks_every_secret_of_a_profile(tmp_path, hostile_server):
    """``validate --json`` and its text form mask the Redis password, the values of api-key,
    x-goog-api-key and Cookie headers and a ``?key=`` in base_url; an ``api_key_env`` that holds
    a key instead of a variable name is a warning that never repeats it."""
    server = hostile_server(lambda _: chat())
    secret = "hunter2-redis-pass"
    headers = {"api-key": KEY, "x-goog-api-key": KEY, "Cookie": f"s={KEY}", "x-trace": "t1"}
    entry = {
        "id": "h",
        "base_url": f"{server.openai_url}?key={KEY}&v=2",
        "credentials": {"api_key_env": VARIABLE_KEY},
        "headers": headers,
    }
    gate = {"kind": "redis", "url": f"redis://:{secret}@127.0.0.1:6379/0"}
    profile = write_profile(tmp_path / "p.toml", [entry], gate=gate)
    exported = {VARIABLE_KEY: "set"}  # an unset variable is an error: the profile unshown
    result = rrcli("validate", profile, "--json", cwd=tmp_path, env=exported)
    text = rrcli("validate", profile, cwd=tmp_path, env=exported)
    unset = rrcli("validate", profile, cwd=tmp_path)
    for output in (result, text, unset):
        assert_no_key(output.stdout + output.stderr)
        assert secret not in output.stdout + output.stderr
        assert VARIABLE_KEY not in output.stdout + output.stderr
    report = orjson.loads(result.stdout)
    (backend,) = report["profile"]["backends"]
    assert {"api-key": "***", "x-goog-api-key": "***", "Cookie": "***", "x-trace": "t1"} == (
        backend["headers"]
    )
    assert backend["base_url"].endswith("?key=***&v=2")
    assert "redis://:***@127.0.0.1:6379/0" == report["profile"]["gate"]["url"]
    assert ["env_looks_like_key"] == [
        w["code"] for w in report["warnings"] if w["code"] == "env_looks_like_key"
    ]
    assert [] == server.requests


@pytest.mark.parametrize(
    "name", ["OPENAI_API_KEY", "my_key_var", "KEY_A", "ANTHROPIC_API_KEY_PROD_2024"]
)
def test_a_variable_name_is_not_mistaken_for_a_key(tmp_path, hostile_server, name):
    """Ordinary variable names raise no "looks like a key" warning."""
    server = hostile_server(lambda _: chat())
    entry = {"id": "h", "base_url": server.openai_url, "credentials": {"api_key_env": name}}
    profile = write_profile(tmp_path / "p.toml", [entry])
    report = orjson.loads(rrcli("validate", profile, "--json", cwd=tmp_path).stdout)
    assert [] == [w for w in report["warnings"] if w["code"] == "env_looks_like_key"]


URL_KEY = "AIzaUrlKey-0123456789abcdef"  # a key written in base_url's query, as Gemini's are


def test_a_key_in_the_base_url_reaches_no_output_when_the_backend_is_down(tmp_path, hostile_server):
    """A backend whose base_url holds ``?key=`` answers 404 naming the address it was asked
    (the key too): the request goes to the endpoint's path with the query after it, and the
    ``backend_down`` log line, the trace's ``backend`` record, the results and the halt's
    message show ``?key=***``, never the key."""

    def not_found(request) -> Canned:
        body = {"error": {"message": f"no such path {request.path}", "type": "not_found"}}
        return _json(404, orjson.dumps(body))

    server = hostile_server(not_found)
    base = f"{server.openai_url}?key={URL_KEY}"
    profile = write_profile(tmp_path / "p.toml", [{"id": "h", "base_url": base}])
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b'{"id": "a", "prompt": "hi"}\n')
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    assert [f"/v1/chat/completions?key={URL_KEY}"] == [r.path for r in server.requests]
    records = read_jsonl(tmp_path / "jobs.traces.jsonl")
    (down,) = [r for r in records if r["event"] == "backend"]
    texts = [
        result.stdout,
        result.stderr,
        *strings(records),
        (tmp_path / "jobs.results.jsonl").read_text(),
    ]
    assert [] == [text for text in texts if URL_KEY in text or URL_KEY[:10] in text]
    assert "backend_down" in result.stderr and "?key=***" in result.stderr
    assert "?key=***" in orjson.dumps(down).decode()


URL_PASSWORD = "hunter2@otter/pass"  # written percent-encoded in a URL: %40 and %2F


def test_a_percent_encoded_url_password_reaches_no_output_in_either_form(tmp_path, hostile_server):
    """A collector URL whose password is written percent-encoded (``user:hunter2%40otter%2F
    pass@``), and a collector that refuses the spans naming that password as written and as it
    reads (``hunter2@otter/pass``) in its status line: ``export``'s and ``run --otlp``'s outputs
    show the URL and the collector's words with ``***`` for both forms, and hold neither."""
    written = quote(URL_PASSWORD, safe="")
    words = f"bad password {URL_PASSWORD} (sent as {written})"
    collector = hostile_server(lambda _: Canned(400, reason=words))
    url = collector.url.replace("http://", f"http://user:{written}@") + "/v1/traces"
    masked = collector.url.replace("http://", "http://user:***@") + "/v1/traces"
    server = hostile_server(lambda _: chat())
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b'{"id": "a", "prompt": "hi"}\n')
    run = rrcli("run", jobs, "-p", profile, "--otlp", url, cwd=tmp_path)
    assert 0 == run.returncode, run.stderr
    export = rrcli("export", "jobs.traces.jsonl", "--otlp", url, cwd=tmp_path)
    assert 1 == export.returncode, export.stderr
    assert collector.requests and {f"Basic {_basic('user', URL_PASSWORD)}"} == {
        r.headers.get("authorization") for r in collector.requests
    }
    assert masked in export.stderr and "bad password *** (sent as ***)" in export.stderr
    assert masked in run.stderr and "bad password ***" in run.stderr
    outputs = run.stdout + run.stderr + export.stdout + export.stderr
    assert [] == [form for form in (URL_PASSWORD, written) if form in outputs]


def _basic(user: str, password: str) -> str:
    import base64

    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_a_key_split_across_stream_chunks_is_never_echoed(tmp_path, hostile_server):
    """``--prompt --stream`` prints the answer as it arrives; a server that streams the key
    split across three chunks (a tenth of a second apart) gets it printed as ``***``: the
    text before and after it as sent, no piece of the key."""
    pieces = ["your key: sk-hostile-01", "23456789ab", "cdefXYZ and more"]

    def streamed(request) -> Canned:
        key = request.headers["authorization"].removeprefix("Bearer ")
        assert KEY == key
        events = [
            {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": p}}]}
            for p in pieces
        ]
        done = {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in [*events, done]]
        return Canned(
            200,
            {"content-type": "text/event-stream"},
            chunks=[*chunks, b"data: [DONE]\n\n"],
            gap=0.1,
        )

    server = hostile_server(streamed)
    profile = profile_for(tmp_path, server)
    result = rrcli("run", "--prompt", "hi", "--stream", "-p", profile, cwd=tmp_path, env=ENV)
    assert 0 == result.returncode, result.stderr
    assert "your key: *** and more" == result.stdout.strip()
    assert_no_key(result.stdout, result.stderr)


def test_a_key_split_at_every_place_in_a_stream_is_never_echoed(tmp_path, hostile_server):
    """``--prompt --stream`` against a server that streams the key again and again, each time
    split across two chunks at another place (after its first character, ..., before its last):
    every one is printed as ``***``, the text around it as sent."""
    deltas = [part for k in range(1, len(KEY)) for part in (f"[{k}] {KEY[:k]}", KEY[k:])]

    def streamed(request) -> Canned:
        events = [
            {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": d}}]}
            for d in deltas
        ]
        done = {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in [*events, done]]
        return Canned(
            200, {"content-type": "text/event-stream"}, chunks=[*chunks, b"data: [DONE]\n\n"]
        )

    server = hostile_server(streamed)
    profile = profile_for(tmp_path, server)
    result = rrcli("run", "--prompt", "hi", "--stream", "-p", profile, cwd=tmp_path, env=ENV)
    assert 0 == result.returncode, result.stderr
    assert "".join(f"[{k}] ***" for k in range(1, len(KEY))) == result.stdout.strip()
    assert_no_key(result.stdout, result.stderr)


def test_otlp_url_credentials_are_never_printed(tmp_path, sim_server):
    """A collector URL with a password and a ``?token=``, where no collector listens:
    ``export``'s "spans not delivered" line and ``run --otlp``'s ``otlp_dropped`` line show
    them as ``***``; neither output holds either."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    password, token = "hunter2-otlp-pass", "tok-otlp-0123456789"
    url = f"http://user:{password}@127.0.0.1:{port}/v1/traces?token={token}"
    masked = f"http://user:***@127.0.0.1:{port}/v1/traces?token=***"
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b'{"id": "a", "prompt": "hi"}\n')
    env = {"OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    run = rrcli("run", jobs, "-p", profile, "--otlp", url, cwd=tmp_path, env=env)
    assert 0 == run.returncode, run.stderr
    export = rrcli("export", "jobs.traces.jsonl", "--otlp", url, cwd=tmp_path, env=env)
    assert 1 == export.returncode, export.stderr
    assert "rrcli.otlp_dropped" in run.stderr and masked in run.stderr
    assert f"spans not delivered to {masked}" in export.stderr
    outputs = run.stdout + run.stderr + export.stdout + export.stderr
    assert [] == [secret for secret in (password, token) if secret in outputs]


TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9-entra-0123456789XYZ"  # an Entra ID token


def token_spellings(token: str) -> list[str]:
    escaped = "".join(f"\\u{ord(c):04x}" for c in token)
    return [token, token[:10], escaped[:30], quote(token, safe=""), *_percent(token)]


def azure_by_command(tmp_path: Path, server) -> Path:
    """A profile of an Azure deployment whose bearer token a command prints (as JSON, as
    ``az account get-access-token`` does): the token is in no file the run reads."""
    script = tmp_path / "print_entra_token.py"
    script.write_text(f"import json\nprint(json.dumps({{'accessToken': {TOKEN!r}}}))\n")
    entry = {
        "id": "az",
        "provider": "azure",
        "base_url": server.url,
        "deployment": "d",
        "model": "gpt-4o-mini",
        "credentials": {"token_command": f"{sys.executable} {script}"},
    }
    return write_profile(tmp_path / "p.toml", [entry], retry={"max_retries": 0})


def test_a_token_a_command_prints_reaches_no_output_whatever_the_server_says(
    tmp_path, hostile_server
):
    """An Azure backend's bearer token, printed by ``credentials.token_command`` once the run
    has started, is masked as a key is: a server that sends it back in every way the key test
    uses (error type and message, a cut text body, escaped, URL-encoded, an SSE error event,
    the model, request id and answer) gets none of its spellings into the results (response
    kept), the traces or a verbose run's stdout and stderr."""
    server = hostile_server(echoing)
    profile = azure_by_command(tmp_path, server)
    jobs = tmp_path / "jobs.jsonl"
    lines = [
        {"id": kind, "prompt": kind, **({"params": {"stream": True}} if kind == "sse" else {})}
        for kind in KINDS
    ]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    result = rrcli("run", jobs, "-p", profile, "--keep-response", "-v", cwd=tmp_path)
    assert 1 == result.returncode, result.stderr
    assert {f"Bearer {TOKEN}"} == {r.headers["authorization"] for r in server.requests}
    assert all("api-key" not in r.headers for r in server.requests)
    written = [
        (tmp_path / "jobs.results.jsonl").read_text(),
        (tmp_path / "jobs.traces.jsonl").read_text(),
        result.stdout,
        result.stderr,
    ]
    records = read_jsonl(tmp_path / "jobs.results.jsonl") + read_jsonl(
        tmp_path / "jobs.traces.jsonl"
    )
    assert [] == [
        s for text in [*written, *strings(records)] for s in token_spellings(TOKEN) if s in text
    ]
    by_id = {r["id"]: r for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert ("your key: ***", "***") == (by_id["reply"]["output"], by_id["reply"]["request_id"])
    assert "***" == by_id["sse"]["error"]["type"]


def test_a_token_a_command_prints_is_never_echoed_from_a_stream(tmp_path, hostile_server):
    """``--prompt --stream`` against a server streaming the command's token back split across
    chunks: printed as ``***``, the text around it as sent."""
    pieces = ["your token: " + TOKEN[:20], TOKEN[20:40], TOKEN[40:] + " and more"]

    def streamed(request) -> Canned:
        events = [
            {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": p}}]}
            for p in pieces
        ]
        done = {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in [*events, done]]
        return Canned(
            200,
            {"content-type": "text/event-stream"},
            chunks=[*chunks, b"data: [DONE]\n\n"],
            gap=0.1,
        )

    server = hostile_server(streamed)
    profile = azure_by_command(tmp_path, server)
    result = rrcli("run", "--prompt", "hi", "--stream", "-p", profile, "-v", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert f"Bearer {TOKEN}" == server.requests[0].headers["authorization"]
    assert "your token: *** and more" == result.stdout.strip()
    assert [] == [s for s in token_spellings(TOKEN) if s in result.stdout + result.stderr]


def test_validate_masks_a_token_commands_arguments(tmp_path, hostile_server):
    """A token command's arguments may hold a secret (``--password x``, ``--secret=x``, a key
    as a word of its own): ``validate`` and ``validate --json`` show the program and the
    options' names, every other word as ``***``."""
    server = hostile_server(lambda _: chat())
    command = f"get-token --password hunter2-pass --secret={KEY} {VARIABLE_KEY} -o json"
    entry = {
        "id": "az",
        "provider": "azure",
        "base_url": server.url,
        "deployment": "d",
        "credentials": {"token_command": command},
    }
    profile = write_profile(tmp_path / "p.toml", [entry])
    report = rrcli("validate", profile, "--json", cwd=tmp_path)
    text = rrcli("validate", profile, cwd=tmp_path)
    for output in (report, text):
        shown = output.stdout + output.stderr
        assert [] == [s for s in ("hunter2-pass", KEY, VARIABLE_KEY) if s in shown]
    (backend,) = orjson.loads(report.stdout)["profile"]["backends"]
    assert (
        "get-token --password *** --secret=*** *** -o ***"
        == (backend["credentials"]["token_command"])
    )
    assert [] == server.requests
