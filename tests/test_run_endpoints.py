"""Every endpoint of the Batch APIs, end to end through the CLI against real local servers.

Embeddings, responses, completions and moderations jobs go only to the backends that serve their
endpoint (asserted from the servers' side); a Responses continuation goes to the backend that
created the response; a job no backend serves is invalid, and ``validate --jobs`` and
``--dry-run`` name it first; replies a client must refuse end as errors with their reason.
"""

from __future__ import annotations

import orjson
from canned_api import canned_apis, vector
from runkit import calls, read_jsonl, rrcli, write_profile

EMBEDDINGS = ["embeddings"]


def write_lines(path, lines):
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def by_id(path):
    return {r["id"]: r for r in read_jsonl(path)}


def test_embeddings_go_only_to_the_backends_that_serve_them(tmp_path):
    """1,000 embeddings jobs over two embedding backends and one chat backend: the chat server
    receives none, both embedding servers share them within their caps, and every result has one
    vector per input, in input order."""
    with canned_apis(("a", ()), ("b", ()), ("c", ()), latency_s=0.001) as (a, b, c):
        profile = write_profile(
            tmp_path / "p.toml",
            [
                {"id": "emb-a", "base_url": a.url, "endpoints": EMBEDDINGS, "max_concurrency": 4},
                {"id": "emb-b", "base_url": b.url, "endpoints": EMBEDDINGS, "max_concurrency": 4},
                {"id": "chat-c", "base_url": c.url},
            ],
            concurrency=12,
        )
        jobs = [
            {"id": f"e{i}", "endpoint": "embeddings", "input": [f"text {i}", f"more {i * 7}"]}
            for i in range(1000)
        ]
        jobs.append({"id": "q", "prompt": "hi"})
        result = rrcli(
            "run", write_lines(tmp_path / "jobs.jsonl", jobs), "-p", profile, cwd=tmp_path
        )
        assert 0 == result.returncode, result.stderr
        assert {"/v1/chat/completions": 1} == dict(c.paths)
        assert 1000 == a.paths["/v1/embeddings"] + b.paths["/v1/embeddings"]
        assert a.paths["/v1/embeddings"] > 0 and b.paths["/v1/embeddings"] > 0
        assert a.peak <= 4 and b.peak <= 4
    results = by_id(tmp_path / "jobs.results.jsonl")
    for i in range(1000):
        r = results[f"e{i}"]
        expected = [vector(f"text {i}", 0), vector(f"more {i * 7}", 1)]
        assert ("ok", "embeddings", expected, {"input_tokens": 14}) == (
            r["status"],
            r["endpoint"],
            r["embeddings"],
            r["usage"],
        )
    assert "chat-c" == results["q"]["deployment"]
    embedding_calls = [c for c in calls(tmp_path / "jobs.traces.jsonl") if c["job_id"] != "q"]
    assert {"embeddings"} == {c["endpoint"] for c in embedding_calls}
    assert {14} == {c["input_tokens"] for c in embedding_calls}


def test_base64_embeddings_are_decoded(tmp_path):
    """``encoding_format = "base64"``: the server sends little-endian float32 text; the result
    holds the numbers, as the float form would."""
    with canned_apis(("a", ())) as (a,):
        profile = write_profile(
            tmp_path / "p.toml", [{"id": "e", "base_url": a.url, "endpoints": EMBEDDINGS}]
        )
        jobs = [
            {
                "id": "b64",
                "endpoint": "embeddings",
                "input": ["x", "yz"],
                "params": {"encoding_format": "base64"},
            },
            {
                "custom_id": "batch",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": "m", "input": "x", "encoding_format": "base64"},
            },
        ]
        result = rrcli(
            "run", write_lines(tmp_path / "jobs.jsonl", jobs), "-p", profile, cwd=tmp_path
        )
    assert 0 == result.returncode, result.stderr
    results = by_id(tmp_path / "jobs.results.jsonl")
    assert [vector("x", 0), vector("yz", 1)] == results["b64"]["embeddings"]
    assert [vector("x", 0)] == results["batch"]["embeddings"]


def test_a_responses_continuation_goes_to_the_backend_that_created_it(tmp_path):
    """Responses created on two accounts; follow-ups appended to the jobs file and run with
    --resume each go to their response's creator (round robin alone would send half of them to
    the other server, which refuses an id it did not create); and when the creator has left the
    pool, the follow-up is an error naming it."""
    with canned_apis(("a", ()), ("b", ())) as (a, b):
        backends = [
            {"id": "resp-a", "base_url": a.url, "endpoints": ["responses"]},
            {"id": "resp-b", "base_url": b.url, "endpoints": ["responses"]},
        ]
        profile = write_profile(tmp_path / "p.toml", backends)
        first = [{"id": f"r{i}", "endpoint": "responses", "input": f"hi {i}"} for i in range(6)]
        jobs = write_lines(tmp_path / "jobs.jsonl", first)
        assert 0 == rrcli("run", jobs, "-p", profile, cwd=tmp_path).returncode
        created = by_id(tmp_path / "jobs.results.jsonl")
        assert {"resp-a", "resp-b"} == {r["deployment"] for r in created.values()}
        follow = [
            {
                "id": f"f{i}",
                "endpoint": "responses",
                "input": "and then?",
                "params": {"previous_response_id": created[f"r{i}"]["response_id"]},
            }
            for i in range(6)
        ]
        write_lines(jobs, first + follow)
        result = rrcli("run", jobs, "-p", profile, "--resume", cwd=tmp_path)
        assert 0 == result.returncode, result.stderr
        results = by_id(tmp_path / "jobs.results.jsonl")
        for i in range(6):
            assert created[f"r{i}"]["deployment"] == results[f"f{i}"]["deployment"]
            assert results[f"f{i}"]["output"].endswith(f"after {created[f'r{i}']['response_id']}")

        write_profile(tmp_path / "p.toml", backends[:1])
        again = [{**job, "id": f"g{i}"} for i, job in enumerate(follow)]
        write_lines(jobs, first + follow + again)
        result = rrcli("run", jobs, "-p", profile, "--resume", cwd=tmp_path)
    assert 1 == result.returncode
    results = by_id(tmp_path / "jobs.results.jsonl")
    for i in range(6):
        line = results[f"g{i}"]
        if created[f"r{i}"]["deployment"] == "resp-a":
            assert "ok" == line["status"]
        else:
            assert ("error", "response_origin_gone") == (line["status"], line["error"]["type"])
            assert (
                'created by backend "resp-b", which is no longer in the pool'
                in (line["error"]["message"])
            )


def test_an_endpoint_no_backend_serves_is_invalid_and_named_first(tmp_path):
    """A moderations job on a chat-only pool: ``validate --jobs`` and ``--dry-run`` name it
    before anything is sent, and the run writes it as invalid with the reason (the endpoint and
    what each backend serves) while the chat job runs."""
    with canned_apis(("a", ())) as (a,):
        profile = write_profile(
            tmp_path / "p.toml",
            [{"id": "chat-a", "base_url": a.url}, {"id": "chat-b", "base_url": a.url}],
        )
        jobs = write_lines(
            tmp_path / "jobs.jsonl",
            [{"id": "m", "endpoint": "moderations", "input": "x"}, {"id": "q", "prompt": "hi"}],
        )
        reason = "line 1: no backend serves the moderations endpoint (chat-a, chat-b serve chat)"
        checked = rrcli("validate", profile, "--jobs", jobs, cwd=tmp_path)
        assert 1 == checked.returncode
        assert reason in checked.stdout
        planned = rrcli(
            "run", jobs, "-p", profile, "--dry-run", cwd=tmp_path, env={"COLUMNS": "300"}
        )
        assert 0 == planned.returncode, planned.stderr
        assert f"invalid: {reason}" in planned.stdout
        assert 0 == sum(a.paths.values())
        result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
        assert 1 == result.returncode
        assert {"/v1/chat/completions": 1} == dict(a.paths)
    results = by_id(tmp_path / "jobs.results.jsonl")
    assert ("invalid", "invalid_job") == (results["m"]["status"], results["m"]["error"]["type"])
    assert results["m"]["error"]["message"].startswith(reason)
    assert "ok" == results["q"]["status"]


def test_replies_a_client_must_refuse_are_errors_with_their_reason(tmp_path):
    """An embeddings reply one vector short and a Responses reply without output text: each job
    is an error of type invalid_response saying so, after its retries; nothing lost, no
    traceback."""
    with canned_apis(("a", ("missing-vector", "empty-output"))) as (a,):
        profile = write_profile(
            tmp_path / "p.toml",
            [{"id": "x", "base_url": a.url, "endpoints": ["embeddings", "responses"]}],
            retry={"max_retries": 1},
        )
        jobs = write_lines(
            tmp_path / "jobs.jsonl",
            [
                {"id": "e", "endpoint": "embeddings", "input": ["a", "b"]},
                {"id": "r", "endpoint": "responses", "input": "hi"},
            ],
        )
        result = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 1 == result.returncode
    assert "Traceback" not in result.stderr
    results = by_id(tmp_path / "jobs.results.jsonl")
    expected = {
        "e": "invalid response: 1 embeddings for 2 inputs",
        "r": "invalid response: the response has no output text (status completed)",
    }
    for job_id, message in expected.items():
        line = results[job_id]
        assert ("error", "invalid_response", message, 2) == (
            line["status"],
            line["error"]["type"],
            line["error"]["message"],
            line["attempts"],
        )


def test_every_endpoint_retries_streams_and_counts_in_stats(tmp_path):
    """A 503 to each first request is retried on the same backend for every endpoint; streamed
    Responses and completions results equal the plain ones; moderations keep one result per
    input; ``stats --by endpoint`` counts the calls of each endpoint (two runs, two each)."""
    jobs = [
        {"id": "e", "endpoint": "embeddings", "input": "one"},
        {"id": "r", "endpoint": "responses", "input": "two"},
        {"id": "c", "endpoint": "completions", "prompt": "three", "params": {"n": 2}},
        {"id": "m", "endpoint": "moderations", "input": ["fine", "bad"]},
    ]
    outputs = {}
    for stream in (False, True):
        with canned_apis(("a", ("fail-first",))) as (a,):
            profile = write_profile(
                tmp_path / "p.toml",
                [
                    {
                        "id": "x",
                        "base_url": a.url,
                        "endpoints": ["embeddings", "responses", "completions", "moderations"],
                    }
                ],
            )
            path = write_lines(tmp_path / "jobs.jsonl", jobs)
            flags = ["--stream"] if stream else []
            result = rrcli("run", path, "-p", profile, "--overwrite", *flags, cwd=tmp_path)
            assert 0 == result.returncode, result.stderr
        results = by_id(tmp_path / "jobs.results.jsonl")
        assert {2} == {r["attempts"] for r in results.values()}
        outputs[stream] = {k: (r.get("output"), r.get("choices")) for k, r in results.items()}
        traced = calls(tmp_path / "jobs.traces.jsonl")
        streamed = {c["endpoint"] for c in traced if c["stream"]}
        assert ({"responses", "completions"} if stream else set()) == streamed
    assert outputs[False] == outputs[True]
    assert ["a completes three #0", "a completes three #1"] == [
        choice["output"] for choice in results["c"]["choices"]
    ]
    assert [False, True] == [m["flagged"] for m in results["m"]["moderations"]]
    summary = rrcli(
        "stats", tmp_path / "jobs.traces.jsonl", "--by", "endpoint", "--json", cwd=tmp_path
    )
    groups = {g["key"]: g["calls"] for g in orjson.loads(summary.stdout)["groups"]}
    assert {"embeddings": 4, "responses": 4, "completions": 4, "moderations": 4} == groups


def test_a_backend_may_list_only_endpoints_its_provider_serves(tmp_path):
    """An anthropic backend listing embeddings is refused with the fix; an openai one is not."""
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {
                "id": "claude",
                "provider": "anthropic",
                "base_url": "http://127.0.0.1:9",
                "endpoints": ["chat", "embeddings"],
            },
            {"id": "emb", "base_url": "http://127.0.0.1:9/v1", "endpoints": ["embeddings"]},
        ],
    )
    result = rrcli("validate", profile, cwd=tmp_path)
    assert 1 == result.returncode
    expected = (
        'backends[0] (id "claude"): endpoints[1]: anthropic backends serve chat only, not '
        '"embeddings" — remove "embeddings", or serve it from an openai backend'
    )
    assert expected in result.stdout
    assert "backends[1]" not in result.stdout
