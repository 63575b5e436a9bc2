"""``rrcli sim``'s Batch APIs, spoken to by the official ``openai`` and ``anthropic`` SDKs: files,
batches and Message Batches parse into the SDKs' types; the timeline (validating → in progress →
finalizing → ended), expiry, partial failures, the enqueued-token limit, per-key state and the
APIs' file limits behave as the providers' do."""

from __future__ import annotations

import io
import json
import urllib.request
from typing import Any

import anthropic
import openai
import pytest

from rrcli.providers.batch_limits import ANTHROPIC_LIMITS, OPENAI_LIMITS

CHAT = "/v1/chat/completions"


def _jsonl(count: int, url: str = CHAT, start: int = 0) -> bytes:
    rows = (
        {
            "custom_id": f"job-{i}",
            "method": "POST",
            "url": url,
            "body": {"model": "gpt-sim", "messages": [{"role": "user", "content": f"say {i}"}]},
        }
        for i in range(start, start + count)
    )
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _requests(count: int) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"job-{i}",
            "params": {
                "model": "claude-sim",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": f"say {i}"}],
            },
        }
        for i in range(count)
    ]


def _submit(client: openai.OpenAI, content: bytes) -> Any:
    file = client.files.create(file=("jobs.jsonl", io.BytesIO(content)), purpose="batch")
    return client.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h")


def _rows(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(r) for r in client.files.content(file_id).text.splitlines()]


def _advance(server: Any, seconds: float) -> None:
    request = urllib.request.Request(
        f"{server.url}/sim/batches/advance?seconds={seconds}", method="POST"
    )
    urllib.request.urlopen(request, timeout=10).close()


def _made(server: Any) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.url}/sim/batches", timeout=10) as response:
        return json.loads(response.read())


def test_openai_sdk_runs_a_batch_and_reads_each_line_as_the_live_answer(sim_server):
    """files.create, batches.create/retrieve/list and files.content parse into the SDK's
    types; each output line's body is what the same live call answers, usage included."""
    server = sim_server()
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    created = _submit(client, _jsonl(3))
    assert "validating" == created.status
    batch = client.batches.retrieve(created.id)
    assert ("completed", 3, 3, 0) == (
        batch.status,
        batch.request_counts.total,
        batch.request_counts.completed,
        batch.request_counts.failed,
    )
    rows = {r["custom_id"]: r for r in _rows(client, batch.output_file_id)}
    live = client.chat.completions.create(
        model="gpt-sim", messages=[{"role": "user", "content": "say 1"}]
    )
    body = openai.types.chat.ChatCompletion.model_validate(rows["job-1"]["response"]["body"])
    assert 200 == rows["job-1"]["response"]["status_code"]
    assert live.choices[0].message.content == body.choices[0].message.content
    assert live.usage == body.usage
    assert [created.id] == [b.id for b in client.batches.list()]
    assert "batch_output" == client.files.retrieve(batch.output_file_id).purpose
    assert client.files.delete(batch.output_file_id).deleted


def test_openai_list_pages_newest_first(sim_server):
    """batches.list pages with ``limit`` and ``after``, newest first, as the API does."""
    server = sim_server()
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    made = [_submit(client, _jsonl(1)).id for _ in range(3)]
    first = client.batches.list(limit=2)
    rest = client.batches.list(limit=2, after=first.data[-1].id)
    assert made[::-1] == [b.id for b in first.data + rest.data]
    assert (True, False) == (first.has_more, rest.has_more)


def test_the_timeline_moves_and_request_counts_follow(sim_server):
    """With a processing time a batch is validating, then in progress with its counts moving,
    then finalizing, then completed (the batch clock moved on, no waiting)."""
    server = sim_server(batch_delay_ms=100_000)
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    batch_id = _submit(client, _jsonl(10)).id
    seen = []
    for seconds in (0, 20, 30, 40, 50):  # to 0, 20, 50, 90, 140 seconds
        _advance(server, seconds)
        batch = client.batches.retrieve(batch_id)
        seen.append((batch.status, batch.request_counts.completed))
    assert [
        ("validating", 0),
        ("in_progress", 1),
        ("in_progress", 5),
        ("finalizing", 10),
        ("completed", 10),
    ] == seen


def test_cancel_ends_the_batch_and_cancels_the_lines_not_done(sim_server):
    """A cancel answers ``cancelling``; then the batch is cancelled, the lines done are in the
    output file and the rest in the error file as ``batch_cancelled``."""
    server = sim_server(batch_delay_ms=100_000)
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    batch_id = _submit(client, _jsonl(10)).id
    _advance(server, 50)
    assert "cancelling" == client.batches.cancel(batch_id).status
    batch = client.batches.retrieve(batch_id)
    assert "cancelled" == batch.status
    errors = _rows(client, batch.error_file_id)
    assert (5, 5) == (len(_rows(client, batch.output_file_id)), len(errors))
    assert {"batch_cancelled"} == {r["error"]["code"] for r in errors}


def test_lines_not_done_within_the_window_expire(sim_server):
    """Processing longer than the window: the batch ends ``expired`` at the window, its lines
    not done then in the error file (OpenAI) or ``expired`` results (Anthropic)."""
    server = sim_server(batch_delay_ms=100_000, batch_window_ms=50_000)
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    batch_id = _submit(client, _jsonl(10)).id
    claude = anthropic.Anthropic(base_url=server.url, api_key="sk-one")
    message_batch = claude.messages.batches.create(requests=_requests(10))
    _advance(server, 60)
    batch = client.batches.retrieve(batch_id)
    errors = _rows(client, batch.error_file_id)
    assert ("expired", 5, {"batch_expired"}) == (
        batch.status,
        len(_rows(client, batch.output_file_id)),
        {r["error"]["code"] for r in errors},
    )
    ended = claude.messages.batches.retrieve(message_batch.id)
    assert ("ended", 5, 5) == (
        ended.processing_status,
        ended.request_counts.succeeded,
        ended.request_counts.expired,
    )
    kinds = [r.result.type for r in claude.messages.batches.results(message_batch.id)]
    assert ["succeeded"] * 5 + ["expired"] * 5 == kinds


def test_a_share_of_lines_fail_as_live_calls_fail(sim_server):
    """``batch_failure_rate``: those lines are 500s in the error file, ``errored`` results."""
    server = sim_server(batch_failure_rate=0.5, seed=7)
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    batch = client.batches.retrieve(_submit(client, _jsonl(40)).id)
    errors = _rows(client, batch.error_file_id)
    assert 0 < batch.request_counts.failed < 40
    assert batch.request_counts.failed == len(errors)
    assert {500} == {r["response"]["status_code"] for r in errors}
    claude = anthropic.Anthropic(base_url=server.url, api_key="sk-one")
    results = list(
        claude.messages.batches.results(claude.messages.batches.create(requests=_requests(40)).id)
    )
    errored = [r for r in results if r.result.type == "errored"]
    assert 0 < len(errored) < 40
    assert {"api_error"} == {r.result.error.error.type for r in errored}


def test_the_enqueued_token_limit_fails_openai_and_refuses_anthropic(sim_server):
    """Past a key's enqueued tokens, OpenAI fails the new batch with ``token_limit_exceeded``
    and Anthropic answers the create 429; another key, or the same once its batches ended,
    may enqueue again."""
    server = sim_server(batch_delay_ms=100_000, batch_enqueued_tokens=50)
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    first = _submit(client, _jsonl(8))  # about 3 input tokens a line
    second = client.batches.retrieve(_submit(client, _jsonl(8, start=8)).id)
    assert "failed" == second.status
    assert ["token_limit_exceeded"] == [e.code for e in second.errors.data]
    other = openai.OpenAI(base_url=server.openai_url, api_key="sk-two")
    assert "validating" == other.batches.retrieve(_submit(other, _jsonl(8)).id).status
    claude = anthropic.Anthropic(base_url=server.url, api_key="sk-one", max_retries=0)
    claude.messages.batches.create(requests=_requests(8))  # each API's batches count apart
    with pytest.raises(anthropic.RateLimitError):
        claude.messages.batches.create(requests=_requests(8))
    _advance(server, 200)
    assert "completed" == client.batches.retrieve(first.id).status
    assert "in_progress" == claude.messages.batches.create(requests=_requests(8)).processing_status


def test_each_key_sees_its_own_batches_and_the_count_of_batches_made(sim_server):
    """Batches belong to the key that made them (another key gets a 404, lists none); a key
    the server does not take is a 401; /sim/batches counts every batch made."""
    server = sim_server(api_keys=["sk-one", "sk-two"])
    one = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    two = openai.OpenAI(base_url=server.openai_url, api_key="sk-two", max_retries=0)
    made = _submit(one, _jsonl(2))
    with pytest.raises(openai.NotFoundError):
        two.batches.retrieve(made.id)
    assert [] == list(two.batches.list())
    stranger = openai.OpenAI(base_url=server.openai_url, api_key="sk-three", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.batches.list()
    claude = anthropic.Anthropic(base_url=server.url, api_key="sk-two")
    claude.messages.batches.create(requests=_requests(2))
    report = _made(server)
    assert 2 == report["created"]
    assert ["openai", "anthropic"] == [b["api"] for b in report["batches"]]


def test_anthropic_sdk_creates_lists_cancels_and_reads_results(sim_server):
    """messages.batches.create/retrieve/list/cancel/results parse into the SDK's types; a
    cancelled batch's lines not done are ``canceled`` results."""
    server = sim_server(batch_delay_ms=100_000)
    claude = anthropic.Anthropic(base_url=server.url, api_key="sk-one")
    made = claude.messages.batches.create(requests=_requests(10))
    assert ("in_progress", 10) == (made.processing_status, made.request_counts.processing)
    assert [made.id] == [b.id for b in claude.messages.batches.list()]
    _advance(server, 50)
    assert "canceling" == claude.messages.batches.cancel(made.id).processing_status
    ended = claude.messages.batches.retrieve(made.id)
    assert ("ended", 5, 5) == (
        ended.processing_status,
        ended.request_counts.succeeded,
        ended.request_counts.canceled,
    )
    results = {r.custom_id: r.result for r in claude.messages.batches.results(made.id)}
    assert "canceled" == results["job-9"].type
    assert "say 0" != results["job-0"].message.content[0].text  # a reply, not the prompt
    assert 0 < results["job-0"].message.usage.input_tokens


def test_openai_more_requests_than_a_batch_holds_fail_the_batch(sim_server):
    """A file of more than 50,000 requests: the batch fails, its error says the limit."""
    server = sim_server()
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-one")
    row = _jsonl(1)
    content = row * (OPENAI_LIMITS.requests + 1)
    batch = client.batches.retrieve(_submit(client, content).id)
    assert "failed" == batch.status
    assert "50,000" in batch.errors.data[0].message


def test_anthropic_more_requests_than_a_batch_holds_are_a_400(sim_server):
    """More than 100,000 requests in one Message Batch: a 400 naming the limit."""
    server = sim_server()
    claude = anthropic.Anthropic(base_url=server.url, api_key="sk-one", max_retries=0)
    one = _requests(1)[0]
    with pytest.raises(anthropic.BadRequestError, match="100,000"):
        claude.messages.batches.create(requests=[one] * (ANTHROPIC_LIMITS.requests + 1))
