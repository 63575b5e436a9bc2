"""Issue 5 end to end: Anthropic backends and streaming, through `rrcli run` against `rrcli sim`.

Every test runs the real command in its own process against real sim servers on loopback. The
sim's output is deterministic per prompt, so a clean run of the same jobs is the expected answer.
"""

from __future__ import annotations

import os
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import orjson
import pytest
from runkit import calls, popen, read_jsonl, rrcli, write_jobs, write_profile

from rrcli.sim.behaviour import key_fingerprint

OPENAI_KEY = "sk-oa-5f3c1e9a7b2d4c6e8f0a1b3c"
ANTHROPIC_KEY = "sk-ant-api03-9d8c7b6a5f4e3d2c1b0a"
KEYS = {"RR_TEST_OPENAI_KEY": OPENAI_KEY, "RR_TEST_ANTHROPIC_KEY": ANTHROPIC_KEY}
TOKENS = 16  # the sim's output length in these tests


def pool(tmp_path: Path, openai_url: str, anthropic_url: str, **extra: object) -> Path:
    """A profile of one OpenAI-compatible backend ("oa") and one Anthropic backend ("an")."""
    oa = {"id": "oa", "provider": "openai", "base_url": openai_url, **extra.pop("oa", {})}
    an = {"id": "an", "provider": "anthropic", "base_url": anthropic_url, **extra.pop("an", {})}
    return write_profile(tmp_path / "pool.toml", [oa, an], **extra)


def by_id(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in read_jsonl(path)}


def calls_by_job(traces: Path) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for call in calls(traces):
        grouped[call["job_id"]].append(call)
    return grouped


def run_ok(*args: object, cwd: Path, env: dict[str, str] | None = None):
    result = rrcli("run", *args, cwd=cwd, env=env)
    assert 0 == result.returncode, result.stderr
    return result


def answers_of(tmp_path: Path, server, *prompts: str) -> list[str]:
    """What the sim answers to each prompt when nothing interferes (a clean --prompt run)."""
    profile = write_profile(
        tmp_path / "clean.toml", [{"id": "clean", "base_url": server.openai_url}]
    )
    flags = [arg for prompt in prompts for arg in ("--prompt", prompt)]
    result = run_ok(*flags, "-p", profile, "-q", "--concurrency", "1", cwd=tmp_path)
    return result.stdout.splitlines()


def test_a_mixed_pool_gives_each_backend_only_its_own_key_in_its_own_header(tmp_path, sim_server):
    """One OpenAI-compatible and one Anthropic backend serve one batch: each call's trace names
    its provider and deployment, each server sees only its backend's key in its own header (the
    servers accept nothing else), and no key appears in results, traces, stdout or stderr."""
    oa_server = sim_server(api_keys=(OPENAI_KEY,), output_tokens=TOKENS)
    an_server = sim_server(api_keys=(ANTHROPIC_KEY,), output_tokens=TOKENS)
    profile = pool(
        tmp_path,
        oa_server.openai_url,
        an_server.url,
        oa={"credentials": {"api_key_env": "RR_TEST_OPENAI_KEY"}},
        an={"credentials": {"api_key_env": "RR_TEST_ANTHROPIC_KEY"}},
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 6)
    result = run_ok(jobs, "-p", profile, "-v", "--concurrency", "2", cwd=tmp_path, env=KEYS)

    assert {"authorization:" + key_fingerprint(OPENAI_KEY): 3} == oa_server.stats()["credentials"]
    assert {"x-api-key:" + key_fingerprint(ANTHROPIC_KEY): 3} == an_server.stats()["credentials"]
    traces = tmp_path / "jobs.traces.jsonl"
    served = Counter((c["deployment"], c["provider"], c["server_address"]) for c in calls(traces))
    oa_address = oa_server.url.removeprefix("http://")
    an_address = an_server.url.removeprefix("http://")
    assert {("oa", "openai", oa_address): 3, ("an", "anthropic", an_address): 3} == served
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert ["ok"] * 6 == [r["status"] for r in results]
    assert {"oa": 3, "an": 3} == Counter(r["deployment"] for r in results)
    everything = [
        (tmp_path / "jobs.results.jsonl").read_text(),
        traces.read_text(),
        result.stdout,
        result.stderr,
    ]
    for key in (OPENAI_KEY, ANTHROPIC_KEY):
        assert [] == [text for text in everything if key in text]


def test_streamed_and_plain_runs_give_the_same_outputs_and_tokens(tmp_path, sim_server):
    """The same jobs, plain and with --stream: identical outputs, token counts and deployments;
    every streamed call has ttft_ms <= latency_ms and close to the server's 40 ms time to first
    token; plain calls record no ttft."""
    server = sim_server(ttft_ms=40, tokens_per_s=400, output_tokens=TOKENS)
    profile = pool(tmp_path, server.openai_url, server.url)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 8)
    outputs = {}
    for mode, flags in (("plain", ()), ("stream", ("--stream",))):
        run_ok(
            jobs, "-p", profile, "--concurrency", "1", *flags,
            "--out", tmp_path / f"{mode}.jsonl", "--traces", tmp_path / f"{mode}.traces.jsonl",
            cwd=tmp_path,
        )  # fmt: skip
        outputs[mode] = {
            r["id"]: (r["deployment"], r["output"], r["usage"])
            for r in read_jsonl(tmp_path / f"{mode}.jsonl")
        }
    assert outputs["plain"] == outputs["stream"]
    assert {TOKENS} == {usage["output_tokens"] for _, _, usage in outputs["plain"].values()}

    plain = calls(tmp_path / "plain.traces.jsonl")
    assert [(False, None)] * 8 == [(c["stream"], c["ttft_ms"]) for c in plain]
    streamed = calls(tmp_path / "stream.traces.jsonl")
    assert [True] * 8 == [c["stream"] for c in streamed]
    assert [] == [c for c in streamed if not c["ttft_ms"] <= c["latency_ms"]]
    assert [] == [c for c in streamed if not 40.0 <= c["ttft_ms"] < 40.0 + 500.0]
    ttft_median = statistics.median(c["ttft_ms"] for c in streamed)
    assert 40.0 <= ttft_median <= 40.0 + 60.0, ttft_median
    # the rest of the tokens came at 400/s after the first: the latency shows it
    assert [] == [c for c in streamed if c["latency_ms"] - c["ttft_ms"] < 15 / 400 * 1000 * 0.9]


def test_a_job_asking_to_stream_is_streamed_without_the_flag(tmp_path, sim_server):
    """A job whose params say "stream": true is streamed (trace stream true, a ttft) even
    without --stream; the others are not."""
    server = sim_server(ttft_ms=20, output_tokens=TOKENS)
    profile = pool(tmp_path, server.openai_url, server.url)
    jobs = tmp_path / "jobs.jsonl"
    lines = [
        {"id": "s-oa", "prompt": "a", "params": {"stream": True}},
        {"id": "s-an", "prompt": "b", "params": {"stream": True}},
        {"id": "p-oa", "prompt": "c"},
        {"id": "p-an", "prompt": "d"},
    ]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    run_ok(jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path)
    seen = {
        c["job_id"]: (c["deployment"], c["stream"], c["ttft_ms"] is not None)
        for c in calls(tmp_path / "jobs.traces.jsonl")
    }
    expected = {
        "s-oa": ("oa", True, True),
        "s-an": ("an", True, True),
        "p-oa": ("oa", False, False),
        "p-an": ("an", False, False),
    }
    assert expected == seen
    assert 2 == server.stats()["streams"]


def test_a_stream_cut_halfway_is_retried_on_the_same_backend(tmp_path, sim_server):
    """Each backend's first stream is cut halfway (no end marker): that call is retried on the
    same backend and the job's output is the whole answer, not the cut half plus the retry."""
    cut = {"headers": {"x-sim-mode": "cut-stream", "x-sim-times": "1"}}
    servers = [sim_server(output_tokens=TOKENS) for _ in range(2)]
    profile = pool(tmp_path, servers[0].openai_url, servers[1].url, oa=cut, an=cut)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    run_ok(jobs, "-p", profile, "--stream", "--concurrency", "1", cwd=tmp_path)

    trail = {
        job: [(c["deployment"], c["attempt"], c["outcome"], c["error_type"]) for c in job_calls]
        for job, job_calls in calls_by_job(tmp_path / "jobs.traces.jsonl").items()
    }
    assert {
        "j0": [("oa", 1, "retry", "stream_broken"), ("oa", 2, "ok", None)],
        "j1": [("an", 1, "retry", "stream_broken"), ("an", 2, "ok", None)],
        "j2": [("oa", 1, "ok", None)],
        "j3": [("an", 1, "ok", None)],
    } == trail
    results = by_id(tmp_path / "jobs.results.jsonl")
    assert {"j0": 2, "j1": 2, "j2": 1, "j3": 1} == {k: r["attempts"] for k, r in results.items()}
    for result in results.values():
        assert TOKENS == len(result["output"].split())
        assert TOKENS == result["usage"]["output_tokens"]


def test_a_529_is_retried_and_a_401_moves_the_job_at_once(tmp_path, sim_server):
    """An Anthropic backend answering 529 (overloaded) once is retried on the same backend after
    the server's retry-after and succeeds; one with a wrong key gets 401 and is not retried
    there although retries remain: its backend leaves the pool and the job is routed again, to
    the healthy backend, its attempts counting on; the run exits 0."""
    busy = sim_server(retry_after_ms=5, output_tokens=TOKENS)
    locked = sim_server(api_keys=("the-right-key",))
    backends = [
        {"id": "busy", "provider": "anthropic", "base_url": busy.url,
         "headers": {"x-sim-status": "529", "x-sim-times": "1"}},
        {"id": "locked", "provider": "anthropic", "base_url": locked.url,
         "credentials": {"api_key_env": "RR_TEST_ANTHROPIC_KEY"}},
    ]  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", backends, retry={"max_retries": 3})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "1", cwd=tmp_path, env=KEYS)
    assert 0 == result.returncode, result.stderr

    trail = [
        (c["deployment"], c["outcome"], c["http_status"], c["error_type"], c["retry_after_ms"])
        for c in calls(tmp_path / "jobs.traces.jsonl")
    ]
    assert [
        ("busy", "retry", 529, "http_529", 5.0),
        ("busy", "ok", 200, None, None),
        ("locked", "retry", 401, "http_401", None),
        ("busy", "ok", 200, None, None),
    ] == trail
    results = by_id(tmp_path / "jobs.results.jsonl")
    assert ("ok", 2) == (results["j0"]["status"], results["j0"]["attempts"])
    moved = results["j1"]
    assert ("ok", 2, "busy") == (moved["status"], moved["attempts"], moved["deployment"])
    assert 1 == locked.stats()["requests"]
    assert ANTHROPIC_KEY not in result.stderr + (tmp_path / "jobs.results.jsonl").read_text()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_pause_turn_is_continued_on_the_same_backend(tmp_path, sim_server, stream):
    """An Anthropic reply that stops with pause_turn is sent again, with the partial answer, to
    the same backend: two trace call records on one deployment, and one result whose output
    joins both parts (the whole answer) and whose usage adds both calls'."""
    server = sim_server(output_tokens=TOKENS)
    pause = {"provider": "anthropic", "base_url": server.url,
             "headers": {"x-sim-mode": "pause-turn"}}  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", [{"id": "an1", **pause}, {"id": "an2", **pause}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2)
    flags = ("--stream",) if stream else ()
    run_ok(jobs, "-p", profile, "--concurrency", "1", *flags, cwd=tmp_path)

    by_job = calls_by_job(tmp_path / "jobs.traces.jsonl")
    assert {"j0": ["an1", "an1"], "j1": ["an2", "an2"]} == {
        job: [c["deployment"] for c in job_calls] for job, job_calls in by_job.items()
    }
    assert [TOKENS // 2] * 4 == [c["output_tokens"] for c in calls(tmp_path / "jobs.traces.jsonl")]
    results = by_id(tmp_path / "jobs.results.jsonl")
    expected = answers_of(tmp_path, server, "question 0", "question 1")
    assert expected == [results["j0"]["output"], results["j1"]["output"]]
    assert [TOKENS, TOKENS] == [results[j]["usage"]["output_tokens"] for j in ("j0", "j1")]
    assert ["stop", "stop"] == [results[j]["finish_reason"] for j in ("j0", "j1")]


def test_a_paused_turn_is_one_whole_message_in_anthropic_batch_output(tmp_path, sim_server):
    """With --format anthropic-batch, a turn continued after pause_turn is one succeeded message
    whose text blocks hold the whole answer and whose usage counts both calls."""
    server = sim_server(output_tokens=TOKENS)
    backend = {"id": "an", "provider": "anthropic", "base_url": server.url,
               "headers": {"x-sim-mode": "pause-turn"}}  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", [backend])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    run_ok(jobs, "-p", profile, "--format", "anthropic-batch", cwd=tmp_path)

    [line] = read_jsonl(tmp_path / "jobs.results.jsonl")
    message = line["result"]["message"]
    assert ("j0", "succeeded", "end_turn") == (
        line["custom_id"],
        line["result"]["type"],
        message["stop_reason"],
    )
    text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
    assert answers_of(tmp_path, server, "question 0") == [text]
    assert TOKENS == message["usage"]["output_tokens"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_prompt_stream_prints_text_as_it_arrives(tmp_path, sim_server, provider):
    """`rrcli run --prompt ... --stream` writes the first words to stdout while the answer is
    still being generated, and stdout ends up holding the whole answer."""
    server = sim_server(ttft_ms=30, tokens_per_s=20, output_tokens=TOKENS)  # ~0.8 s an answer
    url = server.openai_url if provider == "openai" else server.url
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "b", "provider": provider, "base_url": url}]
    )
    proc = popen("run", "--prompt", "tell me", "--stream", "-p", profile, "-q", cwd=tmp_path)
    first = os.read(proc.stdout.fileno(), 4096).decode()  # returns with the first bytes written
    still_running = proc.poll() is None
    rest, stderr = proc.communicate(timeout=60)
    assert 0 == proc.returncode, stderr
    [answer] = answers_of(tmp_path, server, "tell me")
    assert answer + "\n" == first + rest
    assert first and len(first) < len(answer)
    assert still_running


def test_several_streamed_prompts_print_one_whole_answer_after_another(tmp_path, sim_server):
    """Three --prompt with --stream across a mixed pool: each answer is printed whole on its own
    line, in the order given, never interleaved with another's text."""
    server = sim_server(ttft_ms=5, tokens_per_s=400, output_tokens=TOKENS)
    profile = pool(tmp_path, server.openai_url, server.url)
    prompts = ["first question", "second question", "third question"]
    flags = [arg for prompt in prompts for arg in ("--prompt", prompt)]
    result = run_ok(*flags, "--stream", "-p", profile, "-q", cwd=tmp_path)
    assert answers_of(tmp_path, server, *prompts) == result.stdout.splitlines()


def test_prompt_stream_cut_after_text_reports_the_error_and_never_retries(tmp_path, sim_server):
    """A --prompt --stream answer cut halfway, after text was printed: the partial text stays on
    stdout, the error follows it on stderr, the call is not retried (one trace call record) and
    the exit status is 1."""
    server = sim_server(output_tokens=TOKENS)
    backend = {"id": "an", "provider": "anthropic", "base_url": server.url,
               "headers": {"x-sim-mode": "cut-stream"}}  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", [backend], retry={"max_retries": 3})
    traces = tmp_path / "t.jsonl"
    result = rrcli(
        "run", "--prompt", "tell me", "--stream", "-p", profile, "--traces", traces, cwd=tmp_path
    )
    assert 1 == result.returncode, result.stderr
    partial = result.stdout.rstrip("\n")
    [answer] = answers_of(tmp_path, server, "tell me")
    assert partial and answer.startswith(partial) and partial != answer
    assert "stream_broken" in result.stderr
    assert [("an", 1, "error", "stream_broken")] == [
        (c["deployment"], c["attempt"], c["outcome"], c["error_type"]) for c in calls(traces)
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_batch_lines_in_anthropic_batch_results_out(tmp_path, sim_server, stream):
    """Message Batches lines (custom_id, params with a system prompt) run across a mixed pool:
    params.model is replaced by the backend's, max_tokens is honoured, and each output line is
    {custom_id, result: {type: succeeded, message}} — or errored for a line with no messages,
    under its own custom_id."""
    server = sim_server(model=None)
    profile = pool(tmp_path, server.openai_url, server.url, oa={"model": "m-oa"},
                   an={"model": "m-an"})  # fmt: skip
    lines = [
        {"custom_id": f"req-{i}", "params": {
            "model": "claude-ignored", "max_tokens": 5, "system": "Be brief.",
            "messages": [{"role": "user", "content": f"question {i}"}]}}
        for i in range(4)
    ] + [{"custom_id": "req-bad", "params": {"max_tokens": 5}}]  # fmt: skip
    jobs = tmp_path / "batch.jsonl"
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    flags = ("--stream",) if stream else ()
    result = rrcli("run", jobs, "-p", profile, "--format", "anthropic-batch", "--concurrency",
                   "1", *flags, cwd=tmp_path)  # fmt: skip
    assert 1 == result.returncode, result.stderr  # the bad line makes the run exit 1

    out = {
        line["custom_id"]: line["result"] for line in read_jsonl(tmp_path / "batch.results.jsonl")
    }
    assert ["req-0", "req-1", "req-2", "req-3", "req-bad"] == list(out)
    for i in range(4):
        message = out[f"req-{i}"]["message"]
        text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
        summary = (out[f"req-{i}"]["type"], message["type"], message["stop_reason"])
        assert ("succeeded", "message", "max_tokens") == summary
        assert (5, 5) == (len(text.split()), message["usage"]["output_tokens"])
        assert ["m-oa", "m-an"][i % 2] == message["model"]
    errored = out["req-bad"]
    assert ("errored", "error", "invalid_request_error") == (
        errored["type"],
        errored["error"]["type"],
        errored["error"]["error"]["type"],
    )
    assert "params.messages" in errored["error"]["error"]["message"]
    trace = calls(tmp_path / "batch.traces.jsonl")
    assert ["m-oa", "m-an", "m-oa", "m-an"] == [c["response_model"] for c in trace]
    assert [stream] * 4 == [c["stream"] for c in trace]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_openai_batch_lines_in_openai_batch_results_out(tmp_path, sim_server, stream):
    """OpenAI Batch lines run across a mixed pool and come out as Batch output lines: {id,
    custom_id, response: {status_code 200, request_id, body: chat.completion}, error null}, the
    Anthropic-served ones too; a bad line keeps its custom_id and has response null and an
    error with its code."""
    server = sim_server()
    profile = pool(tmp_path, server.openai_url, server.url)
    body = {"model": "gpt-ignored", "max_tokens": 4}
    lines = [
        {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {**body, "messages": [{"role": "user", "content": f"question {i}"}]}}
        for i in range(4)
    ]  # fmt: skip
    lines.append({"custom_id": "req-bad", "method": "POST", "url": "/v1/embeddings", "body": {}})
    jobs = tmp_path / "batch.jsonl"
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    flags = ("--stream",) if stream else ()
    result = rrcli("run", jobs, "-p", profile, "--format", "openai-batch", "--concurrency", "1",
                   *flags, cwd=tmp_path)  # fmt: skip
    assert 1 == result.returncode, result.stderr

    out = {line["custom_id"]: line for line in read_jsonl(tmp_path / "batch.results.jsonl")}
    assert ["req-0", "req-1", "req-2", "req-3", "req-bad"] == list(out)
    for i in range(4):
        line = out[f"req-{i}"]
        body = line["response"]["body"]
        assert line["id"].startswith("batch_req_")
        assert (200, None, "chat.completion") == (
            line["response"]["status_code"],
            line["error"],
            body["object"],
        )
        content = body["choices"][0]["message"]["content"]
        assert (4, 4) == (len(content.split()), body["usage"]["completion_tokens"])
        assert "length" == body["choices"][0]["finish_reason"]
    bad = out["req-bad"]
    assert (None, "invalid_job") == (bad["response"], bad["error"]["code"])
    assert "/v1/embeddings" in bad["error"]["message"]
    assert ["oa", "an", "oa", "an"] == [
        c["deployment"] for c in calls(tmp_path / "batch.traces.jsonl")
    ]
