"""A cached rerun writes what the engine's own path writes: a chat job answered where the cache
read its answer ahead (running/hits.py) gets the result line and the call record, byte for byte,
that a hit routed through the engine gets."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runkit import popen, read_jsonl, rrcli, write_jobs, write_profile

from rrcli.config.profile import Backend, SimSettings
from rrcli.engine.cached import ResponseCache, _decode, _encode
from rrcli.providers.base import Reply
from rrcli.records._jsonl import dumps_line
from rrcli.records.attempt import CallOutcome, cached_attempt
from rrcli.records.cache import CacheFile
from rrcli.records.jobs import parse_job
from rrcli.records.result_line import cached_chat_line, result_line
from rrcli.records.trace import TraceWriter

SIM = {"id": "s", "provider": "sim", "model": "sim", "sim": {"latency_ms": 0}}
BACKENDS = (
    Backend(id="a%b", provider="sim", model="m", sim=SimSettings()),
    Backend(id="b", provider="sim", model="m", sim=SimSettings()),
)
T0 = 1_795_987_889.123456

text = st.text(max_size=12)


def json_values(bits: int) -> st.SearchStrategy:
    """JSON values whose integers fit in ``bits`` bits (a job's metadata may hold wider ones
    than an answer, which came through orjson)."""
    leaves = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) | st.floats(
        allow_nan=False, allow_infinity=False
    )
    return st.recursive(
        st.none() | st.booleans() | leaves | text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=8,
    )


answer_values, metadata_values = json_values(64), json_values(72)
counts = st.none() | st.integers(0, 10**6)
maybe_text = st.none() | text
replies = st.fixed_dictionaries(
    {"output": text},
    optional={
        "finish_reason": maybe_text,
        "input_tokens": counts,
        "output_tokens": counts,
        "response_model": maybe_text,
        "reasoning_content": maybe_text,
        "request_id": maybe_text,
        "body": st.none() | st.dictionaries(text, answer_values, max_size=3),
        "tool_calls": st.none() | st.lists(st.dictionaries(text, answer_values, max_size=2)),
        "refusal": maybe_text,
        "logprobs": answer_values,
        "choices": st.none() | st.lists(st.dictionaries(text, answer_values, max_size=2)),
        "cached_input_tokens": counts,
        "cache_write_tokens": counts,
        "reasoning_tokens": counts,
        "system_fingerprint": maybe_text,
        "usage_estimated": st.booleans(),
    },
)
jobs = st.fixed_dictionaries(
    {"id": st.one_of(st.text(min_size=1, max_size=8).filter(lambda s: not s.startswith("line-")),
                     st.integers(-(2**63), 2**63 - 1)), "prompt": text},
    optional={"metadata": st.dictionaries(text, metadata_values, max_size=3), "session": text},
)  # fmt: skip


def test_a_hit_finished_where_it_was_read_writes_the_engines_lines(tmp_path):
    """For any stored chat answer and any job, the result line built from the stored fields
    and the call record filled into its template are the bytes the engine's path writes from
    the Reply, Attempt and CallOutcome of the same hit (session binding on or off,
    --keep-response or not)."""
    cache = ResponseCache(CacheFile(tmp_path / "c.db"), BACKENDS)
    run_id = "20261129T213129Z-3f9a%2c1b"

    @settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
    @given(replies, jobs, st.sampled_from(BACKENDS), st.booleans(), st.booleans(), st.booleans())
    def check(fields, line, by, binding, keep, stream):
        job = parse_job(json.dumps(line).encode(), 1)
        stored = _encode(Reply(**fields), by)
        general_by, reply = _decode(stored)
        backend, plain = cache._plain(stored)
        assert (by.id, by) == (general_by, backend)
        hit = cached_attempt(job.id, job.session, 0, backend, reply, stream, "chat", T0, 5.0)
        session = job.session if binding else None
        outcome = CallOutcome(job, "ok", hit, reply, None, session)
        expected = dumps_line(result_line(outcome, keep))
        assert expected == dumps_line(cached_chat_line(job, backend, plain, session, keep))

        records: list[bytes] = []
        writer = TraceWriter(None, run_id, tap=records.append)
        writer.call(hit, None)
        writer.cached(job.id, job.session, backend, plain, stream, "chat", T0)
        assert records[0] == records[1]
        assert writer._hits[backend.id, stream, "chat"] is not None  # filled in, not built anew

    check()
    cache.file.close()


def _masked(path: Path) -> list[bytes]:
    """A file's lines sorted, without what differs between two runs: the run id, the times
    of the call records, and the results file the run record names (each run writes its own)."""
    data = path.read_bytes()
    data = re.sub(rb'"run_id":"[^"]*"', b'"run_id":""', data)
    data = re.sub(rb'"results":"[^"]*"', b'"results":""', data)
    data = re.sub(rb'"(ts|ts_start|ts_end)":"[^"]*"', rb'"\1":""', data)
    return sorted(data.splitlines())


def test_a_cached_rerun_writes_what_the_engine_writes_for_its_hits(tmp_path):
    """A rerun of a jobs file whose answers are all stored (its hits finished where the cache
    reads them ahead) writes the same result lines and trace records, byte for byte (run id
    and times aside, in any order), as the same rerun read from a pipe, whose hits each go
    through the engine: plain prompts, ids of both kinds, metadata (an integer beyond 64 bits
    among it), params, a session and an endpoint the pool does not serve; session binding on
    and off."""
    lines = [
        {"id": "p1", "prompt": "one"},
        {"id": 7, "prompt": "seven", "system": "Be brief.", "metadata": {"n": 2**70, "é": [1.5]}},
        {"id": "p3", "messages": [{"role": "user", "content": "hi"}], "params": {"seed": 3}},
        {"custom_id": "c4", "prompt": "custom", "session": "shared"},
        {"id": "s5", "turns": ["a", "b"]},
        {"id": "e6", "endpoint": "embeddings", "input": "vector me"},
    ]
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    for binding in ("request", "session"):
        profile = write_profile(tmp_path / f"{binding}.toml", [SIM], binding=binding)
        cache = ("-p", profile, "--cache", f"{binding}.db")
        outputs = {}
        for name in ("fill", "file", "pipe"):
            given = (jobs,) if name != "pipe" else ("-",)
            out = ("--out", f"{name}.jsonl", "--traces", f"{name}.t", "--overwrite")
            stdin = jobs.read_text() if name == "pipe" else None
            run = rrcli("run", *given, *cache, *out, cwd=tmp_path, stdin=stdin)
            assert run.returncode in (0, 1), run.stderr
            outputs[name] = (tmp_path / f"{name}.jsonl", tmp_path / f"{name}.t")
        cached = [line.get("cached") for line in read_jsonl(outputs["file"][0])]
        assert 5 == cached.count(True)  # every job but the one for an endpoint not served
        for file, pipe in zip(outputs["file"], outputs["pipe"], strict=True):
            assert _masked(pipe) == _masked(file)


def test_ctrl_c_stops_a_rerun_the_cache_answers_whole(tmp_path):
    """SIGINT during a rerun whose every job the cache answers (so no job ever reaches a
    worker) stops it at once: exit 130, fewer result lines than jobs, each whole with its call
    record; --resume then finishes the rest from the cache, one line a job."""
    n = 10_000
    profile = write_profile(tmp_path / "p.toml", [SIM])
    jobs = write_jobs(tmp_path / "jobs.jsonl", n)
    fill = rrcli("run", jobs, "-p", profile, "--cache", "c.db", "-q", cwd=tmp_path)
    assert 0 == fill.returncode, fill.stderr
    out = tmp_path / "again.jsonl"
    args = ("run", jobs, "-p", profile, "--cache", "c.db", "--out", out, "--traces", "again.t")
    proc = popen(*args, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert (130, False) == (proc.returncode, "Traceback" in stderr), stderr
    done = read_jsonl(out)
    records = [r for r in read_jsonl(tmp_path / "again.t") if r["event"] == "call"]
    assert 0 < len(done) == len(records) < n
    assert {True} == {line["cached"] for line in done}

    again = rrcli("run", jobs, "-p", profile, "--cache", "c.db", "--out", out, "--resume",
                  "-q", cwd=tmp_path)  # fmt: skip
    assert 0 == again.returncode, again.stderr
    assert sorted(f"j{i}" for i in range(n)) == sorted(line["id"] for line in read_jsonl(out))
