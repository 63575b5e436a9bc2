"""The jobs file reader (SPEC §3): every shape, every bad line, ids and duplicates."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rrcli.records._compressed import compressed_as
from rrcli.records.jobs import InvalidJob, Job, KeySet, iter_jobs, shard_of

ROOT = Path(__file__).resolve().parents[1]


def parse(*lines: str | bytes, **kwargs) -> list[Job | InvalidJob]:
    data = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
    return list(iter_jobs(io.BytesIO(data), "jobs.jsonl", **kwargs))


def one(line: str | bytes) -> Job | InvalidJob:
    (item,) = parse(line)
    return item


def test_prompt_with_system_and_params():
    """A prompt job becomes a system message then the user prompt; params are kept."""
    job = one(
        '{"id": "q1", "prompt": "What is 2+2?", "system": "Be brief.", '
        '"params": {"max_tokens": 50}}'
    )
    assert isinstance(job, Job)
    assert ("q1", "q1", 1, "prompt") == (job.id, job.key, job.line, job.kind)
    expected = (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    )
    assert expected == job.messages
    assert {"max_tokens": 50} == job.params
    assert (None, "q1", None, None, ()) == (
        job.stream,
        job.session,
        job.metadata,
        job.custom_id,
        job.turns,
    )


def test_messages_job_and_system_key():
    """A messages job keeps its messages; a separate system key becomes a leading system message."""
    job = one('{"id": "q2", "system": "S", "messages": [{"role": "user", "content": "hi"}]}')
    assert "messages" == job.kind
    assert ({"role": "system", "content": "S"}, {"role": "user", "content": "hi"}) == job.messages


def test_session_job():
    """A turns job is a session: the user turns in order, only the system message in messages."""
    job = one('{"id": "s1", "turns": ["Hi", "And then?"], "system": "Sys", "session": "chat-7"}')
    assert ("session", ("Hi", "And then?"), "chat-7") == (job.kind, job.turns, job.session)
    assert ({"role": "system", "content": "Sys"},) == job.messages


def test_openai_batch_line():
    """OpenAI Batch line: custom_id is the id, body.model dropped, other body fields are params."""
    job = one(
        json.dumps(
            {
                "custom_id": "r1",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "gpt-4o",
                    "messages": [{"role": "user", "content": "x"}],
                    "temperature": 0,
                    "stream": False,
                },
            }
        )
    )
    assert ("openai_batch", "r1", "r1") == (job.kind, job.id, job.custom_id)
    assert ({"role": "user", "content": "x"},) == job.messages
    assert ({"temperature": 0}, False) == (job.params, job.stream)


def test_anthropic_batch_line_with_system_blocks():
    """An Anthropic batch line: system text blocks become one leading system message, model dropped,
    content blocks kept as they are."""
    blocks = [
        {"type": "text", "text": "hi"},
        {"type": "image", "source": {"type": "url", "url": "u"}},
    ]
    line = {
        "custom_id": "a1",
        "params": {
            "model": "claude",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            "messages": [{"role": "user", "content": blocks}],
        },
    }
    job = one(json.dumps(line))
    assert ("anthropic_batch", "a1") == (job.kind, job.id)
    expected = ({"role": "system", "content": "A\nB"}, {"role": "user", "content": blocks})
    assert expected == job.messages
    assert {"max_tokens": 100} == job.params


def test_anthropic_batch_string_system():
    """An Anthropic batch line with a string system prompt."""
    job = one(
        '{"custom_id": "a2", "params": {"system": "S", '
        '"messages": [{"role": "user", "content": "x"}]}}'
    )
    assert {"role": "system", "content": "S"} == job.messages[0]


def test_stream_and_model_leave_params():
    """params.stream becomes Job.stream; params.model is dropped (the backend's model is sent)."""
    job = one('{"prompt": "x", "params": {"stream": true, "model": "m", "top_p": 1}}')
    assert (True, {"top_p": 1}) == (job.stream, job.params)


def test_metadata_kept():
    """metadata is carried on the job for the result."""
    assert {"k": [1]} == one('{"prompt": "x", "metadata": {"k": [1]}}').metadata


def test_ids_int_and_str_and_auto():
    """Ids keep their type; the key is the str form; a line without an id gets line-N."""
    jobs = parse('{"id": 7, "prompt": "a"}', '{"id": "7b", "prompt": "b"}', '{"prompt": "c"}')
    assert [(7, "7"), ("7b", "7b"), ("line-3", "line-3")] == [(j.id, j.key) for j in jobs]


def test_duplicate_ids():
    """A repeated id (5 after "5" too) is invalid: id line-N and duplicate_of; the first runs."""
    items = parse(
        '{"id": "5", "prompt": "a"}', '{"id": 5, "prompt": "b"}', '{"id": "5", "prompt": "c"}'
    )
    assert isinstance(items[0], Job)
    assert [("line-2", 5), ("line-3", "5")] == [(i.id, i.duplicate_of) for i in items[1:]]
    assert items[1].message.startswith("line 2: duplicate id 5")


def test_blank_lines_crlf_and_bom():
    """Blank lines are skipped (line numbers still count them); CRLF endings and a BOM are fine."""
    data = b'\xef\xbb\xbf{"id": "a", "prompt": "x"}\r\n\r\n   \n{"id": "b", "prompt": "y"}\r\n'
    jobs = list(iter_jobs(io.BytesIO(data), "jobs.jsonl"))
    assert [("a", 1), ("b", 4)] == [(j.id, j.line) for j in jobs]


def test_huge_line_and_line_limit():
    """A multi-megabyte line parses; a line over the limit is invalid and the next line runs."""
    big = "x" * 3_000_000
    assert big == one(json.dumps({"prompt": big})).messages[0]["content"]
    items = parse(
        json.dumps({"prompt": "y" * 5000}), '{"id": "next", "prompt": "z"}', max_line_bytes=1000
    )
    assert "line 1: longer than 1000 bytes — split the job" == items[0].message
    assert "next" == items[1].id


BAD_LINES = [
    ("not json", "line 1: not valid JSON"),
    (b'{"prompt": "\xff"}', "line 1: not UTF-8 text"),
    ("[1, 2]", "line 1: expected a JSON object, got array"),
    ('"text"', "line 1: expected a JSON object, got string"),
    ('{"id": "a"}', "line 1: none of the job shapes"),
    ('{"prompt": 5}', "line 1: prompt must be a string, got number"),
    ('{"prompt": "x", "system": 1}', "line 1: system must be a string, got number"),
    ('{"prompt": "x", "params": [1]}', "line 1: params must be an object, got array"),
    ('{"prompt": "x", "params": {"stream": "yes"}}', "line 1: params.stream must be true or false"),
    ('{"messages": "hi"}', "line 1: messages must be an array of messages, got string"),
    ('{"messages": []}', "line 1: messages is empty"),
    ('{"messages": ["hi"]}', "line 1: messages[0] must be an object with role and content"),
    ('{"messages": [{"role": "bot", "content": "x"}]}', "line 1: messages[0].role must be one of"),
    (
        '{"messages": [{"role": "user"}]}',
        "line 1: messages[0].content must be a string or an array",
    ),
    ('{"turns": []}', "line 1: turns must be a non-empty array of strings"),
    ('{"turns": ["a", 2]}', "line 1: turns must be a non-empty array of strings"),
    ('{"id": true, "prompt": "x"}', "line 1: id must be a string or an integer, got boolean"),
    ('{"id": 1.5, "prompt": "x"}', "line 1: id must be a string or an integer, got number"),
    ('{"id": "", "prompt": "x"}', "line 1: id is empty"),
    ('{"id": "line-9", "prompt": "x"}', 'line 1: id "line-9" is reserved'),
    ('{"id": "a", "custom_id": "b", "prompt": "x"}', "line 1: has both id and custom_id"),
    ('{"prompt": "x", "messages": []}', "line 1: has both prompt and messages"),
    (
        '{"prompt": "x", "sytem": "s"}',
        'line 1: unknown key "sytem" for a prompt job (did you mean "system"?',
    ),
    ('{"prompt": "x", "metadata": 3}', "line 1: metadata must be an object, got number"),
    ('{"prompt": "x", "session": []}', "line 1: session must be a string, got array"),
    (
        '{"custom_id": "r", "url": "/v1/images/generations", "body": {}}',
        'line 1: url "/v1/images/generations" is not an endpoint rrcli sends',
    ),
    ('{"custom_id": "r", "url": "/v1/embeddings", "body": {}}', "line 1: body.input is missing"),
    ('{"custom_id": "r", "url": "/v1/completions", "body": {}}', "line 1: body.prompt is missing"),
    (
        '{"custom_id": "r", "method": "GET", "url": "/v1/chat/completions", "body": {}}',
        'line 1: method "GET" — only "POST" is accepted',
    ),
    (
        '{"custom_id": "r", "url": "/v1/chat/completions", "body": {}}',
        "line 1: body.messages is missing",
    ),
    (
        '{"custom_id": "r", "url": "/v1/chat/completions", "body": 1}',
        "line 1: body must be an object",
    ),
    ('{"custom_id": "r", "params": {"max_tokens": 1}}', "line 1: params.messages is missing"),
    (
        '{"custom_id": "r", "params": {"system": 3, '
        '"messages": [{"role": "user", "content": "x"}]}}',
        "line 1: params.system must be a string",
    ),
]


#: the bad lines above whose id is readable: their InvalidJob keeps it
KEPT_IDS = {line: "r" for line, _ in BAD_LINES if str(line).startswith('{"custom_id": "r"')}
KEPT_IDS['{"id": "a"}'] = "a"


@pytest.mark.parametrize(("line", "expected"), BAD_LINES)
def test_bad_line_message(line, expected):
    """Each kind of bad line is an InvalidJob with a message naming line and cause, and its own
    id when it has a readable one (else line-N)."""
    item = one(line)
    assert isinstance(item, InvalidJob)
    own = KEPT_IDS.get(line, "line-1")
    assert (own, 1, None, "jobs.jsonl") == (item.id, item.line, item.duplicate_of, item.source)
    assert expected == item.message[: len(expected)]


def test_bad_line_does_not_stop_the_stream():
    """Lines after a bad one are still read, with their own line numbers."""
    items = parse('{"prompt": "a"}', "{oops", '{"prompt": "c"}')
    assert [Job, InvalidJob, Job] == [type(i) for i in items]
    assert [1, 2, 3] == [i.line for i in items]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
shape_keys = st.sampled_from(
    [
        "id",
        "custom_id",
        "prompt",
        "system",
        "messages",
        "turns",
        "params",
        "session",
        "metadata",
        "url",
        "method",
        "body",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(shape_keys | st.text(max_size=6), json_values, max_size=6))
def test_any_object_line_is_a_job_or_invalid(obj):
    """Any JSON object line gives exactly one Job or InvalidJob, never an exception."""
    items = parse(json.dumps(obj))
    assert 1 == len(items)
    assert isinstance(items[0], Job | InvalidJob)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60))
def test_any_bytes_never_raise(data):
    """Arbitrary bytes never raise: every non-blank line is a Job or an InvalidJob (bytes
    that start as a gzip or zstd stream are refused whole, as test_compressed_jobs shows)."""
    assume(compressed_as(data.removeprefix(b"\xef\xbb\xbf")) is None)
    items = list(iter_jobs(io.BytesIO(data), "x"))
    assert all(isinstance(i, Job | InvalidJob) for i in items)


text = st.text(max_size=20)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": text}),
    min_size=1,
    max_size=3,
)
valid_job = st.one_of(
    st.fixed_dictionaries({"prompt": text}, optional={"system": text}),
    st.fixed_dictionaries({"messages": messages}),
    st.fixed_dictionaries(
        {"turns": st.lists(text, min_size=1, max_size=3)}, optional={"system": text}
    ),
).flatmap(
    lambda shape: st.fixed_dictionaries(
        {},
        optional={
            "params": st.dictionaries(
                st.sampled_from(["max_tokens", "temperature", "top_p"]), st.integers(0, 9)
            ),
            "metadata": st.dictionaries(st.text(max_size=5), st.integers()),
            "session": text,
        },
    ).map(lambda extra: {**shape, **extra})
)


@settings(max_examples=100, deadline=None)
@given(st.lists(valid_job, max_size=8), st.data())
def test_valid_jobs_round_trip(jobs, data):
    """Valid jobs written as JSONL (unique ids, str or int) come back with the same content."""
    ids = data.draw(
        st.lists(
            st.integers(0, 10**6) | st.text(min_size=1, max_size=6),
            min_size=len(jobs),
            max_size=len(jobs),
            unique_by=str,
        )
    )
    lines = []
    for job_id, job in zip(ids, jobs, strict=True):
        if isinstance(job_id, str) and job_id.startswith("line-"):
            job_id = "x" + job_id
        lines.append({"id": job_id, **job})
    parsed = parse(*(json.dumps(line) for line in lines))
    assert [line["id"] for line in lines] == [j.id for j in parsed]
    for line, job in zip(lines, parsed, strict=True):
        assert line.get("params", {}) == job.params
        assert line.get("metadata") == job.metadata
        assert line.get("session", str(line["id"])) == job.session
        system = [{"role": "system", "content": line["system"]}] if "system" in line else []
        if "prompt" in line:
            assert [*system, {"role": "user", "content": line["prompt"]}] == list(job.messages)
        elif "messages" in line:
            assert line["messages"] == list(job.messages)
        else:
            assert (system, line["turns"]) == (list(job.messages), list(job.turns))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=6), max_size=3000))
def test_keyset_is_a_set(keys):
    """KeySet answers like a Python set: add says whether the key was new; membership matches."""
    ks, ref = KeySet(), set()
    for key in keys:
        assert (key not in ref) == ks.add(key)
        ref.add(key)
    assert len(ref) == len(ks)
    assert all(k in ks for k in ref)
    assert ("\x00absent" in ref) == ("\x00absent" in ks)


def test_shard_of_is_stable_across_processes():
    """shard_of gives the same shard in another process with another hash seed; covers 0..n-1."""
    keys = [f"job-{i}" for i in range(200)]
    here = [shard_of(k, 7) for k in keys]
    code = (
        "import json; from rrcli.records.jobs import shard_of; "
        "print(json.dumps([shard_of(f'job-{i}', 7) for i in range(200)]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert here == json.loads(out.stdout)
    assert set(range(7)) == set(here)


def test_fields_of_an_eval_file_are_ignored():
    """Extra fields that are not near-misses of ours ("answer", "category") do not make a job
    invalid: eval files carry them."""
    item = one('{"id": "q", "prompt": "2+2?", "answer": "4", "category": "math"}')
    assert isinstance(item, Job)
    assert ({"role": "user", "content": "2+2?"},) == item.messages


def test_integers_beyond_64_bits_stay_exact_in_metadata():
    """A line holding an integer beyond 64 bits (orjson alone would make it a float) keeps it
    exact in its metadata; 64-bit integers and long digit strings are unchanged too."""
    metadata = {"": -9223372036854775809, "u64": 2**64 - 1, "big": 10**30, "s": "1" * 25}
    job = one(json.dumps({"id": "a", "prompt": "x", "metadata": metadata}))
    assert metadata == job.metadata
    assert [int, int, int, str] == [type(v) for v in job.metadata.values()]


def test_integers_beyond_64_bits_cannot_be_sent_or_be_an_id():
    """A request part (params, messages) or an id holding an integer beyond 64 bits is an
    invalid line naming the field and the fix: no API takes one, and a changed number would
    be sent without a word."""
    big = 123456789012345678901
    lines = [
        {"id": "p", "prompt": "x", "params": {"seed": big}},
        {"id": "m", "messages": [{"role": "user", "content": [{"type": "text", "n": big}]}]},
        {"id": big, "prompt": "x"},
    ]
    expected = [
        f"line 1: params.seed: {big} does not fit in 64 bits — write it as a string",
        f"line 2: messages[0].content[0].n: {big} does not fit in 64 bits — write it as a string",
        f"line 3: id {big} does not fit in 64 bits — write it as a string",
    ]
    assert expected == [item.message for item in parse(*map(json.dumps, lines))]
