"""Every endpoint of the Batch APIs end to end through the CLI, against a canned OpenAI-compatible
server whose answers the test chooses (``canned_api``; the pool and continuation tests against
``rrcli sim`` are test_run_endpoints_sim.py).

Base64 vectors decode to the server's exact numbers; every endpoint is retried, streamed where
its API streams (equal to the plain result) and counted by ``stats --by endpoint``; a job no
backend serves is invalid, and ``validate --jobs`` and ``--dry-run`` name it first; a backend
lists only the endpoints its provider has.
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


def test_every_endpoint_retries_streams_and_counts_in_stats(tmp_path):
    """A 503 to each first request is retried on the same backend for every endpoint; streamed
    Responses and completions results equal the plain ones; moderations keep one result per
    input; ``stats --by endpoint`` counts the calls of each endpoint (the last run's, as
    ``--overwrite`` starts the traces afresh: the 503 and its retry)."""
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
    assert {"embeddings": 2, "responses": 2, "completions": 2, "moderations": 2} == groups


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


def test_a_probe_and_the_batch_format_speak_the_backends_endpoint(tmp_path):
    """``validate --probe`` asks an embeddings-only backend for an embedding (a chat probe would
    fail there); ``--format openai-batch`` writes an embeddings job's body as the server sent it,
    and ``--keep-response`` keeps that body in the rrcli line."""
    with canned_apis(("a", ())) as (a,):
        profile = write_profile(
            tmp_path / "p.toml", [{"id": "emb", "base_url": a.url, "endpoints": EMBEDDINGS}]
        )
        probed = rrcli("validate", profile, "--probe", cwd=tmp_path)
        assert 0 == probed.returncode, probed.stdout
        assert {"/v1/embeddings": 1} == dict(a.paths)
        jobs = write_lines(
            tmp_path / "jobs.jsonl", [{"id": "e", "endpoint": "embeddings", "input": "x"}]
        )
        result = rrcli("run", jobs, "-p", profile, "--format", "openai-batch", cwd=tmp_path)
        assert 0 == result.returncode, result.stderr
        kept = rrcli("run", jobs, "-p", profile, "--keep-response", "--out", "kept.jsonl",
                     cwd=tmp_path)  # fmt: skip
        assert 0 == kept.returncode, kept.stderr
    (line,) = read_jsonl(tmp_path / "jobs.results.jsonl")
    body = line["response"]["body"]
    (whole,) = read_jsonl(tmp_path / "kept.jsonl")
    assert body == whole["response"]
    assert ("e", 200, "list", [vector("x", 0)]) == (
        line["custom_id"],
        line["response"]["status_code"],
        body["object"],
        [item["embedding"] for item in body["data"]],
    )


def test_a_base_url_with_a_query_keeps_it_after_the_endpoint_path(tmp_path, sim_server):
    """A base_url with a query string (``?api-version=…``, as Azure's are written): each
    endpoint's path goes after the base's path and the query after both, for every endpoint of
    an OpenAI-compatible backend and for an Anthropic one; every job is ok."""
    query = "?api-version=2024-10-21"
    endpoints = ["chat", "embeddings", "responses"]
    jobs = [
        {"id": "c", "prompt": "hi"},
        {"id": "e", "endpoint": "embeddings", "input": "x"},
        {"id": "r", "endpoint": "responses", "input": "y"},
    ]
    write_lines(tmp_path / "jobs.jsonl", jobs)
    with canned_apis(("a", ())) as (a,):
        backend = {"id": "o", "base_url": a.url + query, "endpoints": endpoints}
        profile = write_profile(tmp_path / "p.toml", [backend])
        result = rrcli("run", "jobs.jsonl", "-p", profile, cwd=tmp_path)
        assert 0 == result.returncode, result.stderr
        assert {f"/v1/{path}{query}": 1 for path in ("chat/completions", *endpoints[1:])} == dict(
            a.paths
        )
    server = sim_server()
    backend = {"id": "m", "provider": "anthropic", "base_url": server.url + "/" + query}
    profile = write_profile(tmp_path / "m.toml", [backend])
    write_lines(tmp_path / "chat.jsonl", jobs[:1])
    result = rrcli("run", "chat.jsonl", "-p", profile, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    assert ["ok"] == [r["status"] for r in read_jsonl(tmp_path / "chat.results.jsonl")]
    assert 1 == server.stats()["paths"]["/v1/messages"]
