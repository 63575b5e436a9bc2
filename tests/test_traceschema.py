"""One trace schema (SPEC §5): the writer's records, the stats reader's fields and the tests'
generator all follow rrcli/records/traceschema.py, and its timestamps read back as written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson
from hypothesis import given
from hypothesis import strategies as st
from runkit import rrcli, write_profile
from stats_tracegen import run_records

from rrcli.records import traceschema as schema
from rrcli.stats import decoding

# the call record exactly as the schema types it: every field, nothing else
STRICT_CALL = msgspec.defstruct("StrictCall", schema.CALL, forbid_unknown_fields=True)


def check_record(record: dict[str, Any]) -> None:
    """``record`` has the schema's fields of its event, in order (a call: typed as declared)."""
    if record["event"] == "call":
        assert list(schema.CALL_FIELDS) == list(record)
        msgspec.convert(record, STRICT_CALL)
        for name in ("ts_start", "ts_end"):
            assert schema.rfc3339(schema.parse_rfc3339(record[name])) == record[name]
    elif record["event"] == "run":
        assert list(schema.RUN_FIELDS) == list(record)
        assert list(schema.PROFILE_FIELDS) == list(record["profile"])
        for backend in record["profile"]["backends"]:
            assert list(schema.BACKEND_FIELDS) == list(backend)
    elif record["event"] == "backend":
        assert list(schema.BACKEND_EVENT_FIELDS) == list(record)
        assert record["state"] in schema.BACKEND_STATES
    elif record["event"] == "refused":
        assert list(schema.REFUSED_FIELDS) == list(record)
    else:
        assert list(schema.RUN_END_FIELDS) == list(record)
        assert list(schema.JOB_COUNTS) == list(record["jobs"])


def test_the_writer_follows_the_schema(tmp_path, sim_server):
    """A real run's trace (retries, errors, a stream, a session) has exactly the schema's
    records: fields in order, call values of the declared types."""
    server = sim_server(error_rate=0.3, seed=4)
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "max_concurrency": 2}],
        binding="session",
        retry={"max_retries": 2},
    )
    jobs = [{"id": f"j{i}", "prompt": f"q {i}"} for i in range(12)]
    jobs += [
        {"id": "s", "turns": ["one", "two"]},
        {"id": "t", "prompt": "x", "params": {"stream": True}},
    ]
    (tmp_path / "jobs.jsonl").write_bytes(b"".join(orjson.dumps(j) + b"\n" for j in jobs))
    done = rrcli(
        "run", "jobs.jsonl", "-p", profile, "-q", "--out", "out.jsonl", "--traces", "t.jsonl",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    records = [orjson.loads(line) for line in (tmp_path / "t.jsonl").read_bytes().splitlines()]
    assert {"run", "call", "run_end"} == {r["event"] for r in records}
    assert {"ok", "retry"} <= {r["outcome"] for r in records if r["event"] == "call"}
    for record in records:
        check_record(record)


def test_a_backend_record_follows_the_schema_and_stats_reads_it(tmp_path, sim_server):
    """A run whose backend's key is refused writes a ``backend`` record with the schema's
    fields in order; ``rrcli stats`` reads the trace with no malformed line."""
    locked, open_ = sim_server(api_keys=("right",)), sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [
            {"id": "locked", "base_url": locked.openai_url, "credentials": {"api_key": "wrong"}},
            {"id": "open", "base_url": open_.openai_url},
        ],
    )
    (tmp_path / "jobs.jsonl").write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n')
    done = rrcli("run", "jobs.jsonl", "-p", profile, "-q", "--concurrency", "1", "--traces",
                 "t.jsonl", cwd=tmp_path)  # fmt: skip
    assert 0 == done.returncode, done.stderr
    records = [orjson.loads(line) for line in (tmp_path / "t.jsonl").read_bytes().splitlines()]
    assert ["run", "call", "backend", "call", "call", "run_end"] == [r["event"] for r in records]
    for record in records:
        check_record(record)
    stats = rrcli("stats", "t.jsonl", "--json", cwd=tmp_path)
    assert 0 == stats.returncode, stats.stderr
    assert 0 == orjson.loads(stats.stdout)["malformed_lines"]


def test_the_generator_follows_the_schema():
    """The tests' synthetic traces have exactly the schema's records and types."""
    for record in run_records("r", jobs=40, start_ms=1_767_000_000_000, seed=1):
        check_record(record)


def test_the_reader_reads_schema_fields_with_schema_types():
    """Every field stats decodes is a schema field, typed as the schema says (or null)."""
    types = msgspec.structs.fields(decoding.Call)
    assert [n for n in schema.CALL_FIELDS if n in {f.name for f in types}] == [
        f.name for f in types
    ]
    for f in types:
        declared = schema.CALL_TYPES[f.name]
        assert f.type in (declared, declared | None), f.name
    nested = {
        decoding.Run: schema.RUN_FIELDS,
        decoding._Profile: schema.PROFILE_FIELDS,
        decoding._Backend: schema.BACKEND_FIELDS,
        decoding._Price: schema.PRICE_FIELDS,
        decoding.RunEnd: schema.RUN_END_FIELDS,
        decoding.BackendEvent: schema.BACKEND_EVENT_FIELDS,
        decoding.Refused: schema.REFUSED_FIELDS,
    }
    for struct, fields in nested.items():
        assert set() == set(struct.__struct_fields__) - set(fields), struct.__name__


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_rfc3339_is_datetimes_reading_to_the_millisecond(ts):
    """A timestamp is the instant as datetime reads it (to the microsecond), truncated to the
    millisecond, in RFC 3339 UTC; parsing it gives back that millisecond."""
    dt = datetime.fromtimestamp(ts, UTC)
    expected = f"{dt:%Y-%m-%dT%H:%M:%S}.{dt.microsecond // 1000:03d}Z"
    assert expected == schema.rfc3339(ts)
    assert dt.replace(microsecond=dt.microsecond // 1000 * 1000).timestamp() == (
        schema.parse_rfc3339(expected)
    )


@given(st.integers(0, 4_102_444_800_000))
def test_whole_milliseconds_keep_their_digits(ms):
    """Epoch milliseconds given as seconds (``ms / 1000``) format to exactly those
    milliseconds, whatever the float's rounding."""
    expected = datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert f"{expected}.{ms % 1000:03d}Z" == schema.rfc3339(ms / 1000)


def test_parse_rfc3339_reads_offsets_and_naive_times_as_utc():
    """Any RFC 3339 form parses to epoch seconds (naive means UTC); other text is None."""
    assert 1_767_225_600.0 == schema.parse_rfc3339("2026-01-01T00:00:00Z")
    assert 1_767_225_600.0 == schema.parse_rfc3339("2026-01-01T01:00:00+01:00")
    assert 1_767_225_600.5 == schema.parse_rfc3339("2026-01-01T00:00:00.500")
    assert None is schema.parse_rfc3339("yesterday")
