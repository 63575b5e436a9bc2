"""Embeddings and Responses jobs through the CLI against ``rrcli sim`` servers.

A pool of two embedding backends and one chat backend: the chat server receives no embeddings
request (asserted from its ``/stats``). A Responses continuation goes to the server that created
its response (another refuses it, as OpenAI refuses another account's id). The sim's refusal
modes (``x-sim-mode``) send the replies a client must refuse.
"""

from __future__ import annotations

import orjson
from runkit import calls, read_jsonl, rrcli, write_profile

from rrcli.sim.endpoints import unit_vector


def write_lines(path, lines):
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def by_id(path):
    return {r["id"]: r for r in read_jsonl(path)}


def test_embeddings_go_only_to_the_backends_that_serve_them(tmp_path, sim_server):
    """1,000 embeddings jobs over two embedding backends and one chat backend: the chat server
    receives none, both embedding servers share them within their caps, and every result has one
    vector per input, in input order (base64 decoded where asked)."""
    a, b, c = (sim_server(latency_ms=1) for _ in range(3))
    embeddings = {"endpoints": ["embeddings"], "max_concurrency": 4}
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "emb-a", "base_url": a.openai_url, **embeddings},
            {"id": "emb-b", "base_url": b.openai_url, **embeddings},
            {"id": "chat-c", "base_url": c.openai_url},
        ],
        concurrency=12,
    )
    jobs = [
        {
            "id": f"e{i}",
            "endpoint": "embeddings",
            "input": [f"text {i}", f"more {i * 7}"],
            "params": {"dimensions": 8, **({"encoding_format": "base64"} if i % 2 else {})},
        }
        for i in range(1000)
    ]
    path = write_lines(tmp_path / "jobs.jsonl", [*jobs, {"id": "q", "prompt": "hi"}])
    result = rrcli("run", path, "-p", profile, cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    served = [s.stats() for s in (a, b, c)]
    assert {"/v1/chat/completions": 1} == served[2]["paths"]
    assert [True, True] == [s["paths"]["/v1/embeddings"] > 0 for s in served[:2]]
    assert 1000 == sum(s["paths"]["/v1/embeddings"] for s in served[:2])
    assert all(s["peak_concurrency"] <= 4 for s in served[:2])
    results = by_id(tmp_path / "jobs.results.jsonl")
    for i in range(1000):
        expected = [unit_vector(f"text {i}", 8).tolist(), unit_vector(f"more {i * 7}", 8).tolist()]
        line = results[f"e{i}"]
        assert ("ok", "embeddings", expected) == (
            line["status"],
            line["endpoint"],
            line["embeddings"],
        )
    assert "chat-c" == results["q"]["deployment"]
    traced = [t for t in calls(tmp_path / "jobs.traces.jsonl") if t["job_id"] != "q"]
    assert {"embeddings"} == {t["endpoint"] for t in traced}


def test_a_responses_continuation_goes_to_the_backend_that_created_it(tmp_path, sim_server):
    """Responses created on two servers; follow-ups appended to the jobs file, those of the
    second server's responses first, and run with --resume each go to their response's creator
    (round robin alone would send the first to the first server, which refuses an id it did not
    create); once the creator has left the pool, a follow-up is an error naming it."""
    a, b = sim_server(), sim_server()
    backends = [
        {"id": "resp-a", "base_url": a.openai_url, "endpoints": ["responses"]},
        {"id": "resp-b", "base_url": b.openai_url, "endpoints": ["responses"]},
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
        for i in sorted(range(6), key=lambda i: created[f"r{i}"]["deployment"] != "resp-b")
    ]
    write_lines(jobs, first + follow)
    result = rrcli("run", jobs, "-p", profile, "--resume", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    results = by_id(tmp_path / "jobs.results.jsonl")
    assert [created[f"r{i}"]["deployment"] for i in range(6)] == [
        results[f"f{i}"]["deployment"] for i in range(6)
    ]
    seen = [r["body"] for s in (a, b) for r in s.received("/v1/responses")]
    expected = {created[f"r{i}"]["response_id"] for i in range(6)}
    assert expected == {body.get("previous_response_id") for body in seen} - {None}

    write_profile(tmp_path / "p.toml", backends[:1])
    again = [{**job, "id": "g" + job["id"][1:]} for job in follow]
    write_lines(jobs, first + follow + again)
    assert 1 == rrcli("run", jobs, "-p", profile, "--resume", cwd=tmp_path).returncode
    results = by_id(tmp_path / "jobs.results.jsonl")
    for i in range(6):
        line = results[f"g{i}"]
        if created[f"r{i}"]["deployment"] == "resp-a":
            assert "ok" == line["status"]
        else:
            assert ("error", "response_origin_gone") == (line["status"], line["error"]["type"])
            gone = 'created by backend "resp-b", which is no longer in the pool'
            assert gone in line["error"]["message"]


def test_replies_a_client_must_refuse_are_errors_with_their_reason(tmp_path, sim_server):
    """An embeddings reply one vector short and a Responses reply without output text: each job
    is an error of type invalid_response saying so, after its retries; no traceback."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {
                "id": "x",
                "base_url": server.openai_url,
                "endpoints": ["embeddings", "responses"],
                "headers": {"x-sim-mode": "missing-vector,empty-output"},
            }
        ],
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
