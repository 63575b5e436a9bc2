"""``rrcli run`` on a bedrock backend, against ``rrcli sim`` speaking Bedrock's wire (the same
sim boto3 is held to in test_bedrock_wire.py): both client APIs' jobs translated to Converse,
tools, streaming, prompt caching, SigV4 with the AWS credential chain (a wrong secret takes the
backend down and is never written), throttling retried, and the profile's checks."""

from __future__ import annotations

import sys

import orjson
from bedrockkit import AWS_ENV, MODEL, SECRET, bedrock_profile
from runkit import calls, read_jsonl, rrcli

from rrcli.config.load import validate_profile
from rrcli.config.prices import lookup_price

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
OPENAI_JOB = {
    "id": "o1",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
    ],
    "params": {"max_completion_tokens": 40, "temperature": 0.5, "top_p": 0.9, "stop": ["END"]},
}
ANTHROPIC_JOB = {
    "custom_id": "a1",
    "params": {
        "model": "claude",
        "max_tokens": 30,
        "system": "Long rules.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Oslo.", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "Weather?"},
                ],
            }
        ],
    },
}
TOOL_JOB = {
    "id": "t1",
    "messages": [{"role": "user", "content": "Weather in Oslo?"}],
    "params": {
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}}]
    },
}
TOOL_RESULT_JOB = {
    "id": "t2",
    "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    ],
    "params": TOOL_JOB["params"],
}


def run(tmp_path, sim, jobs, *args, env=None, name="jobs", **backend):
    """``rrcli run`` of ``jobs`` on one bedrock backend at ``sim``: (process, results, traces)."""
    profile = bedrock_profile(tmp_path / f"{name}.toml", sim.url, **backend)
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(j) + b"\n" for j in jobs))
    done = rrcli("run", path, "-p", profile, "--overwrite", *args, cwd=tmp_path, env=env or AWS_ENV)
    results = {
        r.get("id") or r.get("custom_id"): r for r in read_jsonl(tmp_path / f"{name}.results.jsonl")
    }
    return done, results, tmp_path / f"{name}.traces.jsonl"


def test_jobs_of_both_apis_reach_converse(tmp_path, sim_server):
    """An OpenAI-shaped job and an Anthropic Message Batches line are sent as Converse bodies:
    system blocks, inferenceConfig (maxTokens, temperature, topP, stopSequences), a cachePoint
    after the block marked cache_control; signed for the access key; both answered ok."""
    sim = sim_server(api_keys=[SECRET])
    done, results, _ = run(tmp_path, sim, [OPENAI_JOB, ANTHROPIC_JOB], "--concurrency", "1")
    assert 0 == done.returncode, done.stderr
    assert ["ok", "ok"] == [results["o1"]["status"], results["a1"]["status"]]
    bodies = [r["body"] for r in sim.received()]
    config = {"maxTokens": 40, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]}
    assert {
        "system": [{"text": "Be brief."}],
        "messages": [{"role": "user", "content": [{"text": "Weather in Oslo?"}]}],
        "inferenceConfig": config,
    } == bodies[0]
    cached = [{"text": "Oslo."}, {"cachePoint": {"type": "default"}}, {"text": "Weather?"}]
    assert [{"text": "Long rules."}] == bodies[1]["system"]
    assert cached == bodies[1]["messages"][0]["content"]
    assert {"maxTokens": 30} == bodies[1]["inferenceConfig"]
    assert [f"/model/{MODEL}/converse"] * 2 == [r["path"] for r in sim.received()]
    assert 2 == sum(n for k, n in sim.stats()["credentials"].items() if k.startswith("aws:"))


def test_tool_calls_and_results_round_trip(tmp_path, sim_server):
    """A job with tools gets OpenAI-shaped tool_calls; its history with the call and the
    tool's result is sent as toolUse and toolResult blocks, and answered with text."""
    sim = sim_server(api_keys=[SECRET])
    done, results, _ = run(tmp_path, sim, [TOOL_JOB, TOOL_RESULT_JOB], "--concurrency", "1")
    assert 0 == done.returncode, done.stderr
    call = results["t1"]["tool_calls"][0]
    assert ("tool_calls", "weather") == (results["t1"]["finish_reason"], call["function"]["name"])
    assert isinstance(orjson.loads(call["function"]["arguments"])["city"], str)
    assert results["t2"]["output"] and "stop" == results["t2"]["finish_reason"]
    sent = sim.received()[1]["body"]
    use = {"toolUse": {"toolUseId": "call_1", "name": "weather", "input": {"city": "Oslo"}}}
    result = {"toolResult": {"toolUseId": "call_1", "content": [{"text": "rain"}]}}
    assert [use] == sent["messages"][1]["content"]
    assert [result] == sent["messages"][2]["content"]
    spec = {"toolSpec": {"name": "weather", "inputSchema": {"json": WEATHER}}}
    assert [spec] == sent["toolConfig"]["tools"]


def test_a_streamed_result_equals_the_plain_one(tmp_path, sim_server):
    """With --stream the calls go to /converse-stream, whose event-stream frames fold into the
    result the plain call gives (text, tool calls, usage), with a time to first token."""
    sim = sim_server(api_keys=[SECRET])
    jobs = [OPENAI_JOB, TOOL_JOB]
    _, plain, _ = run(tmp_path, sim, jobs, name="plain")
    done, streamed, traces = run(tmp_path, sim, jobs, "--stream", name="streamed")
    assert 0 == done.returncode, done.stderr
    for job in ("o1", "t1"):
        fields = ("output", "tool_calls", "finish_reason", "usage")
        assert [plain[job].get(f) for f in fields] == [streamed[job].get(f) for f in fields]
    assert f"/model/{MODEL}/converse-stream" == sim.received()[-1]["path"]
    assert all(c["ttft_ms"] is not None for c in calls(traces))


def test_reasoning_text_plain_and_streamed(tmp_path, sim_server):
    """A reasoningContent block (plain) and its reasoning deltas (streamed) are the result's
    reasoning_content, the same both ways."""
    sim = sim_server(api_keys=[SECRET])
    headers = {"x-sim-mode": "reasoning"}
    _, plain, _ = run(tmp_path, sim, [OPENAI_JOB], name="plain", headers=headers)
    done, streamed, _ = run(tmp_path, sim, [OPENAI_JOB], "--stream", name="s", headers=headers)
    assert 0 == done.returncode, done.stderr
    assert plain["o1"]["reasoning_content"].startswith("sim reasoning: ")
    expected = [plain["o1"][k] for k in ("reasoning_content", "output")]
    assert expected == [streamed["o1"][k] for k in ("reasoning_content", "output")]


def test_cache_reads_count_as_input_and_cached(tmp_path, sim_server):
    """Bedrock's cacheReadInputTokens are input tokens (inputTokens counts the rest) and the
    result's cached_input_tokens."""
    sim = sim_server(api_keys=[SECRET])
    done, results, _ = run(tmp_path, sim, [OPENAI_JOB], headers={"x-sim-mode": "cache"})
    assert 0 == done.returncode, done.stderr
    usage = results["o1"]["usage"]
    assert 0 < usage["cached_input_tokens"] < usage["input_tokens"]


def test_a_wrong_secret_takes_the_backend_down_and_is_never_written(tmp_path, sim_server):
    """A secret the sim's botocore check refuses (403 InvalidSignatureException) takes the
    backend down at its first call, the message naming the exception and the AWS credentials
    to check; neither secret appears in results, traces or logs."""
    sim = sim_server(api_keys=[SECRET])
    wrong = "Wrong/Secret+Access+Key+abcdefghijklmnopq"
    env = {**AWS_ENV, "AWS_SECRET_ACCESS_KEY": wrong}
    jobs = [OPENAI_JOB, TOOL_JOB]
    done, results, traces = run(tmp_path, sim, jobs, "--concurrency", "1", env=env)
    assert 0 != done.returncode
    assert 1 == sim.stats()["requests"]
    assert "InvalidSignatureException" in results["o1"]["error"]["message"]
    assert "no healthy backend left" in done.stderr
    assert "AWS credentials (the default chain)" in done.stderr
    written = done.stdout + done.stderr + traces.read_text()
    written += (tmp_path / "jobs.results.jsonl").read_text()
    assert [] == [s for s in (wrong, SECRET) if s in written]


def test_throttling_is_retried(tmp_path, sim_server):
    """A ThrottlingException (429) is retried on the backend: the job ends ok at its second
    attempt, the first traced as http_429."""
    sim = sim_server(api_keys=[SECRET])
    headers = {"x-sim-status": "429", "x-sim-times": "1"}
    done, results, traces = run(tmp_path, sim, [OPENAI_JOB], headers=headers)
    assert 0 == done.returncode, done.stderr
    assert ("ok", 2) == (results["o1"]["status"], results["o1"]["attempts"])
    assert ["http_429", None] == [c.get("error_type") for c in calls(traces)]


def test_no_aws_credentials_is_a_clear_error(tmp_path, sim_server):
    """With no credentials anywhere in the chain the backend is down before any request, the
    message saying where credentials come from."""
    sim = sim_server(api_keys=[SECRET])
    env = {**AWS_ENV, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    done, results, _ = run(tmp_path, sim, [OPENAI_JOB], env=env)
    assert 0 != done.returncode
    assert 0 == sim.stats()["requests"]
    message = results["o1"]["error"]["message"]
    assert "no AWS credentials for backend 'br'" in message
    assert "credentials.profile" in message


def test_a_named_aws_profile_signs(tmp_path, sim_server):
    """credentials.profile names a profile of the shared credentials file; its keys sign."""
    sim = sim_server(api_keys=[SECRET])
    shared = tmp_path / "credentials"
    shared.write_text(f"[team]\naws_access_key_id = AKIDTEAM\naws_secret_access_key = {SECRET}\n")
    env = {**AWS_ENV, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(shared)
    done, results, _ = run(tmp_path, sim, [OPENAI_JOB], env=env, credentials={"profile": "team"})
    assert 0 == done.returncode, done.stderr
    assert "ok" == results["o1"]["status"]


def check(tmp_path, backend, environ=None):
    path = tmp_path / "p.toml"
    path.write_bytes(tomli_dumps({"backends": [{"id": "br", "provider": "bedrock", **backend}]}))
    return validate_profile(path, environ=environ or {})


def tomli_dumps(data):
    import tomli_w

    return tomli_w.dumps(data).encode()


def test_validate_names_a_missing_region_and_a_key(tmp_path):
    """A bedrock backend with no region anywhere, or with an API key, is an error naming the
    field and the fix."""
    report = check(tmp_path, {"credentials": {"api_key_env": "KEY"}})
    found = {d.path: d for d in report.errors}
    assert "export AWS_REGION" in found["backends[0].region"].fix
    assert "credentials.profile" in found["backends[0].credentials.api_key_env"].fix


def test_region_from_the_environment_sets_the_endpoint(tmp_path):
    """Without region, AWS_REGION gives it, and the base_url is that region's endpoint."""
    report = check(tmp_path, {}, {"AWS_REGION": "eu-west-1"})
    assert () == report.errors
    backend = report.profile.backends[0]
    expected = ("eu-west-1", "https://bedrock-runtime.eu-west-1.amazonaws.com")
    assert expected == (backend.region, backend.base_url)


def test_validate_says_to_install_the_extra(tmp_path, monkeypatch):
    """Without botocore, validate says to pip install 'rrcli[bedrock]'."""
    monkeypatch.setitem(sys.modules, "botocore", None)
    report = check(tmp_path, {"region": "us-east-1"})
    assert ["pip install 'rrcli[bedrock]'"] == [d.fix for d in report.errors]


def test_prices_come_from_genai_prices():
    """A bedrock model at its AWS endpoint is priced by genai-prices (its provider ``aws``),
    cache reads and writes included."""
    url = "https://bedrock-runtime.us-east-1.amazonaws.com"
    price = lookup_price("bedrock", url, "us.anthropic.claude-3-5-haiku-20241022-v1:0")
    assert (0.8, 4.0, 0.08, 1.0) == (
        price.input,
        price.output,
        price.cached_input,
        price.cache_write,
    )


def test_a_json_schema_answer_is_the_forced_tools_input(tmp_path, sim_server):
    """An OpenAI job asking for a json_schema answer is sent as a forced tool; the result is
    that tool's input as JSON text, finish reason stop, no tool call left."""
    sim = sim_server(api_keys=[SECRET])
    schema = {"name": "city", "schema": WEATHER}
    job = {
        **OPENAI_JOB,
        "params": {"response_format": {"type": "json_schema", "json_schema": schema}},
    }
    done, results, _ = run(tmp_path, sim, [job])
    assert 0 == done.returncode, done.stderr
    result = results["o1"]
    assert ("stop", None) == (result["finish_reason"], result.get("tool_calls"))
    assert isinstance(orjson.loads(result["output"])["city"], str)
    sent = sim.received()[0]["body"]["toolConfig"]
    assert {"tool": {"name": sent["tools"][0]["toolSpec"]["name"]}} == sent["toolChoice"]


def test_expiring_credentials_are_fetched_again(tmp_path, sim_server):
    """Credentials from a profile's credential_process that are about to expire are fetched
    again before the next call is signed (botocore's refresh), not reused."""
    sim = sim_server(api_keys=[SECRET])
    runs = tmp_path / "runs"
    script = tmp_path / "creds.py"
    keys = {"Version": 1, "AccessKeyId": "AKIDPROC", "SecretAccessKey": SECRET}
    script.write_text(
        "import datetime, json, pathlib\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "runs.write_text((runs.read_text() if runs.exists() else '') + 'x')\n"
        "soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=60)\n"
        f"keys = {keys!r}\n"
        "print(json.dumps({**keys, 'Expiration': soon.strftime('%Y-%m-%dT%H:%M:%SZ')}))\n"
    )
    config = tmp_path / "config"
    config.write_text(f"[profile proc]\ncredential_process = {sys.executable} {script}\n")
    env = {**AWS_ENV, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    env["AWS_CONFIG_FILE"] = str(config)
    jobs = [OPENAI_JOB, {**OPENAI_JOB, "id": "o2"}]
    done, results, _ = run(
        tmp_path, sim, jobs, "--concurrency", "1", env=env, credentials={"profile": "proc"}
    )
    assert 0 == done.returncode, done.stderr
    assert ["ok", "ok"] == [results["o1"]["status"], results["o2"]["status"]]
    assert 3 <= len(runs.read_text())  # resolved, then fetched again before each call


def test_validate_probe_signs_a_tiny_converse(tmp_path, sim_server):
    """`validate --probe` sends one tiny signed Converse call: ok with the right secret, a
    failure naming InvalidSignatureException with a wrong one; no secret printed."""
    sim = sim_server(api_keys=[SECRET])
    profile = bedrock_profile(tmp_path / "p.toml", sim.url)
    wrong = "Wrong/Secret+Access+Key+abcdefghijklmnopq"
    lines = []
    for secret in (SECRET, wrong):
        env = {**AWS_ENV, "AWS_SECRET_ACCESS_KEY": secret}
        done = rrcli("validate", "--probe", profile, cwd=tmp_path, env=env)
        lines.append(next(ln for ln in done.stdout.splitlines() if ln.startswith("probe:")))
        assert secret not in done.stdout + done.stderr
    assert lines[0].startswith("probe: br: ok in ")
    assert "FAILED" in lines[1] and "InvalidSignatureException" in lines[1]
    assert [f"/model/{MODEL}/converse"] * 2 == [r["path"] for r in sim.received()]


def test_a_server_echoing_the_session_token_gets_it_into_no_output(tmp_path, sim_server):
    """A session token travels with each request (X-Amz-Security-Token); a server echoing it
    in its error gets it masked in the result, the traces and the log."""
    sim = sim_server(api_keys=[SECRET])
    token = "FwoGZXIvYXdzEXAMPLEsessionTOKEN0123456789abcdef"
    headers = {"x-sim-status": "400", "x-sim-error-message": f"bad token {token}"}
    env = {**AWS_ENV, "AWS_SESSION_TOKEN": token}
    done, results, traces = run(tmp_path, sim, [OPENAI_JOB], env=env, headers=headers)
    assert "ok" != results["o1"]["status"]
    assert "bad token ***" in results["o1"]["error"]["message"]
    assert token == sim.received()[0]["headers"]["x-amz-security-token"]
    written = done.stdout + done.stderr + traces.read_text()
    written += (tmp_path / "jobs.results.jsonl").read_text()
    assert token not in written


def test_a_mixed_pool_serves_both_shapes_on_every_backend(tmp_path, sim_server):
    """A pool of a bedrock, an anthropic and an openai backend (one sim speaking all three)
    runs OpenAI-shaped and Message Batches jobs round robin: every job ok, every backend used,
    each receiving its own API's bodies."""
    import tomli_w

    sim = sim_server(api_keys=[SECRET, "sk-sim-key-0123456789"])
    key = {"api_key_env": "SIM_KEY"}
    backends = [
        {"id": "br", "provider": "bedrock", "base_url": sim.url, "region": "us-east-1"},
        {"id": "an", "provider": "anthropic", "base_url": sim.url, "credentials": key},
        {"id": "oa", "provider": "openai", "base_url": sim.openai_url, "credentials": key},
    ]
    for backend in backends:
        backend.update(model=MODEL, allow_private=True)
    profile = {"strategy": "round_robin", "backends": backends}
    (tmp_path / "mixed.toml").write_bytes(tomli_w.dumps(profile).encode())
    jobs = [{**OPENAI_JOB, "id": f"o{n}"} for n in range(3)]
    jobs += [{**ANTHROPIC_JOB, "custom_id": f"a{n}"} for n in range(3)]  # each backend: both
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(orjson.dumps(j) + b"\n" for j in jobs))
    env = {**AWS_ENV, "SIM_KEY": "sk-sim-key-0123456789"}
    done = rrcli(
        "run", path, "-p", tmp_path / "mixed.toml", "--concurrency", "1", cwd=tmp_path, env=env
    )
    assert 0 == done.returncode, done.stderr
    results = read_jsonl(tmp_path / "mixed.results.jsonl")
    assert ["ok"] * 6 == [r["status"] for r in results]
    shapes = {(r["deployment"], (r.get("id") or r["custom_id"])[0]) for r in results}
    assert {(b, shape) for b in ("br", "an", "oa") for shape in "oa"} == shapes
    paths = {r["path"] for r in sim.received()}
    assert {f"/model/{MODEL}/converse", "/v1/messages", "/v1/chat/completions"} == paths
