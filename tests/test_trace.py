"""The trace file (SPEC §5): record fields and order, RFC 3339 timestamps, no secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rrcli import __version__
from rrcli.config.profile import Backend, Credentials, Price, Profile, SimSettings
from rrcli.errors import ProviderError, UsageError
from rrcli.providers.base import Reply
from rrcli.records.attempt import Attempt
from rrcli.records.trace import CALL_FIELDS, TraceWriter, new_run_id

T0 = 1_795_987_889.123456  # 2026-11-29T21:31:29.123Z

PROFILE = Profile(
    name="pool",
    strategy="least_loaded",
    binding="session",
    backends=(
        Backend(
            id="openai-a",
            base_url="https://user:hunter2@api.example.com:8443/v1?key=sk-in-url",
            model="gpt-4o-mini",
            credentials=Credentials(api_key="sk-secret-literal"),
            headers={"X-Api-Token": "tok-secret-header"},
            params={"temperature": 0},
            max_concurrency=4,
            price=Price(input=0.15, output=0.6),
        ),
        Backend(id="sim-1", provider="sim", base_url="sim://local", sim=SimSettings()),
    ),
)


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]]


def call(writer: TraceWriter, server_address: str | None = None, **overrides: object) -> None:
    """Write the call record of one attempt: job q1's first, on openai-a, a success in 231.5 ms
    unless ``overrides`` say otherwise (Attempt's fields)."""
    fields: dict[str, object] = {
        "job_id": "q1",
        "session": None,
        "turn": 0,
        "number": 1,
        "backend": PROFILE.backends[0],
        "binding": None,
        "stream": False,
        "endpoint": "chat",
        "ts_start": T0,
        "started": 10.0,
        "ended": 10.2315,
        "queue_s": 0.0,
        "estimate": 0,
        "reply": Reply("4", http_status=200),
        "error": None,
        "decision": "ok",
    }
    writer.call(Attempt(**{**fields, **overrides}), server_address)  # type: ignore[arg-type]


def test_run_record_names_the_pool_without_secrets(tmp_path):
    """The run record lists each backend's id, provider, model, host, cap and price, never keys,
    headers, URL user info or query."""
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, "run-1", clock=lambda: T0) as writer:
        writer.run(PROFILE)
    (record,) = read(path)
    assert ["event", "run_id", "ts", "rrcli_version", "profile", "queue", "results"] == list(record)
    assert ("run", "run-1", "2026-11-29T21:31:29.123Z", __version__, None) == (
        record["event"],
        record["run_id"],
        record["ts"],
        record["rrcli_version"],
        record["queue"],
    )
    expected = {
        "name": "pool",
        "strategy": "least_loaded",
        "binding": "session",
        "backends": [
            {
                "id": "openai-a",
                "provider": "openai",
                "model": "gpt-4o-mini",
                "host": "api.example.com:8443",
                "max_concurrency": 4,
                "price": {"input": 0.15, "output": 0.6},
            },
            {
                "id": "sim-1",
                "provider": "sim",
                "model": "gpt-4o-mini",
                "host": None,
                "max_concurrency": 8,
                "price": None,
            },
        ],
    }
    assert expected == record["profile"]
    text = path.read_text()
    for secret in ("sk-secret-literal", "tok-secret-header", "hunter2", "sk-in-url"):
        assert secret not in text


def test_call_record_has_exactly_the_spec_fields_in_order(tmp_path):
    """A call record carries exactly SPEC §5's fields in SPEC order, with the values given."""
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, "run-1") as writer:
        call(
            writer,
            "api.example.com:443",
            job_id=7,
            session="s1",
            turn=2,
            number=3,
            binding="kept",
            queue_s=0.0035,
            reply=None,
            error=ProviderError(
                "slow down", type="http_429", transient=True, status_code=429, retry_after=1.0
            ),
            decision="retry",
            backoff_s=1.0,
            stream=True,
            endpoint="responses",
        )
    (record,) = read(path)
    expected_fields = [
        "event", "run_id", "job_id", "session", "turn", "attempt", "deployment", "provider",
        "model", "response_model", "server_address", "binding", "rebound_for", "outcome",
        "http_status", "error_type", "retry_after_ms", "backoff_ms", "queue_ms", "ts_start",
        "ts_end", "latency_ms", "ttft_ms", "input_tokens", "output_tokens", "cached_input_tokens",
        "usage_estimated", "cost_usd", "cost_estimated", "stream", "endpoint",
    ]  # fmt: skip
    assert expected_fields == list(record)
    assert list(CALL_FIELDS) == list(record)
    assert ("call", "run-1", 7, "s1", 2, 3, "kept", "retry", 429, "responses") == (
        record["event"],
        record["run_id"],
        record["job_id"],
        record["session"],
        record["turn"],
        record["attempt"],
        record["binding"],
        record["outcome"],
        record["http_status"],
        record["endpoint"],
    )
    assert ("2026-11-29T21:31:29.123Z", "2026-11-29T21:31:29.354Z") == (
        record["ts_start"],
        record["ts_end"],
    )
    assert 231.5 == record["latency_ms"]
    assert (1000.0, 1000.0, 3.5) == (
        record["retry_after_ms"],
        record["backoff_ms"],
        record["queue_ms"],
    )


def test_call_record_of_a_success_carries_the_reply(tmp_path):
    """A success's record has the reply's status, response model, ttft and usage, and null error
    fields."""
    path = tmp_path / "t.jsonl"
    reply = Reply("4", "stop", 12, 1, "gpt-4o-mini-2024-07-18", http_status=200, ttft_ms=80.25)
    with TraceWriter(path, "r") as writer:
        call(writer, reply=reply)
    (record,) = read(path)
    expected = ("ok", 200, "gpt-4o-mini-2024-07-18", 80.25, 12, 1, None, None, None)
    assert expected == tuple(
        record[k]
        for k in ("outcome", "http_status", "response_model", "ttft_ms", "input_tokens",
                  "output_tokens", "error_type", "retry_after_ms", "backoff_ms")
    )  # fmt: skip


def test_call_defaults(tmp_path):
    """Unset call fields are null, turn 0, attempt 1, stream false."""
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, "r") as writer:
        call(writer)
    (record,) = read(path)
    assert (0, 1, False, None, None, None) == (
        record["turn"],
        record["attempt"],
        record["stream"],
        record["session"],
        record["binding"],
        record["ttft_ms"],
    )


def test_run_end_record(tmp_path):
    """run_end carries the four job counts (0 when absent), whether the run was interrupted, its
    budget (null for a run without one) and why it halted itself (null when it did not)."""
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, "r", clock=lambda: T0) as writer:
        writer.run_end({"ok": 9, "error": 1}, interrupted=True)
    (record,) = read(path)
    expected = {
        "event": "run_end",
        "run_id": "r",
        "ts": "2026-11-29T21:31:29.123Z",
        "jobs": {"ok": 9, "error": 1, "invalid": 0, "skipped": 0},
        "interrupted": True,
        "budget": None,
        "halted": None,
    }
    assert expected == record
    assert list(expected) == list(record)


def test_appends_across_runs(tmp_path):
    """A second run appends to the trace file; each line carries its own run_id."""
    path = tmp_path / "t.jsonl"
    for run_id in ("a", "b"):
        with TraceWriter(path, run_id) as writer:
            writer.run(PROFILE)
            call(writer)
    assert ["a", "a", "b", "b"] == [r["run_id"] for r in read(path)]


def test_no_path_writes_nothing(tmp_path):
    """TraceWriter(None) accepts every record and writes nowhere."""
    writer = TraceWriter(None, "r")
    writer.run(PROFILE)
    call(writer)
    writer.run_end({}, False)
    writer.close()
    assert [] == list(tmp_path.iterdir())


def test_unwritable_path_is_a_usage_error(tmp_path):
    """A trace path in a missing folder is a usage error naming the path, before any call."""
    with pytest.raises(UsageError, match=f"cannot write traces to {tmp_path}/nope/t.jsonl"):
        TraceWriter(tmp_path / "nope" / "t.jsonl", "r")


def test_new_run_id_is_unique_and_sortable():
    """Run ids start with their UTC start time and differ from run to run."""
    a, b = new_run_id(lambda: T0), new_run_id(lambda: T0)
    assert a != b
    assert "20261129T213129Z" == a.split("-")[0]
