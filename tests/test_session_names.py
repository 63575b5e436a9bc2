"""A session name is a key: however long a client makes it, what is kept and written of it is
at most ``MAX_SESSION_BYTES`` (its start and a digest of the whole), so ``rrcli serve``'s memory
and its traces do not grow with it, and two long names that differ only at their end stay two
sessions; through ``serve``, ``rrcli run`` and ``rrcli.Pool``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from runkit import calls, read_jsonl, rrcli, write_profile
from servekit import Served

import rrcli as library
from rrcli.records.jobs import MAX_SESSION_BYTES, session_name

MIB = 1 << 20
HI = [{"role": "user", "content": "Hi"}]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _profile(tmp_path, sim):
    backends = [{"id": f"b{i}", "base_url": sim.openai_url} for i in range(2)]
    return write_profile(tmp_path / "pool.toml", backends, name="pool", binding="session")


def _long(n: int, end: str) -> str:
    return "s" * (n - len(end)) + end


def test_serve_memory_and_trace_stay_flat_under_4_mib_session_names(tmp_path, sim_server):
    """60 requests each naming a session of its own with a 4 MiB ``user``: serve's RSS stays
    within 10 MB of where it was after the first few, the traces file stays small, and each
    session is traced as at most MAX_SESSION_BYTES bytes."""
    sim = sim_server(ttft_ms=1, tokens_per_s=5000, output_tokens=4)
    traces = tmp_path / "serve.traces.jsonl"
    served = Served(_profile(tmp_path, sim), tmp_path, "--no-auth", "--traces", str(traces))
    url = served.url + "/v1/chat/completions"
    try:
        with httpx2.Client(timeout=60) as client:

            def ask(i: int) -> None:
                body = {"model": "pool", "messages": HI, "user": _long(4 * MIB, str(i))}
                reply = client.post(url, content=orjson.dumps(body))
                assert 200 == reply.status_code, reply.text
                if i % 10 == 0:
                    sim.reset()  # the sim keeps the bodies it received; this test's own memory

            for i in range(5):
                ask(i)
            before = _rss_mb(served.proc.pid)
            for i in range(5, 65):
                ask(i)
            after = _rss_mb(served.proc.pid)
    finally:
        served.stop()
    assert after - before < 10, f"RSS {before:.0f} MB -> {after:.0f} MB"
    assert traces.stat().st_size < 1 * MIB
    sessions = {c["session"] for c in calls(traces)}
    assert 65 == len(sessions)
    assert all(len(s.encode()) <= MAX_SESSION_BYTES and s.startswith("sss") for s in sessions)


def test_serve_long_header_names_differing_at_the_end_are_two_sessions(tmp_path, sim_server):
    """Two 40 KiB ``x-session-id`` headers that differ only in their last character are two
    sessions, each traced at most MAX_SESSION_BYTES long; the same long name again is the
    same session."""
    sim = sim_server(ttft_ms=1, tokens_per_s=5000, output_tokens=4)
    traces = tmp_path / "serve.traces.jsonl"
    served = Served(_profile(tmp_path, sim), tmp_path, "--no-auth", "--traces", str(traces))
    names = [_long(40 * 1024, "a"), _long(40 * 1024, "b"), _long(40 * 1024, "a")]
    try:
        with httpx2.Client(timeout=60) as client:
            for name in names:
                body = {"model": "pool", "messages": HI}
                reply = client.post(
                    served.url + "/v1/chat/completions",
                    json=body,
                    headers={"x-session-id": name},
                )
                assert 200 == reply.status_code, reply.text
    finally:
        served.stop()
    traced = [c["session"] for c in calls(traces)]
    assert traced[0] != traced[1] and traced[0] == traced[2]
    assert all(len(s.encode()) <= MAX_SESSION_BYTES for s in traced)


def test_run_keeps_a_huge_session_name_short(tmp_path, sim_server):
    """Jobs of ``rrcli run`` naming 1 MiB sessions: results and traces hold each as at most
    MAX_SESSION_BYTES bytes, the same name is one session and names that differ only at their
    end are two."""
    sim = sim_server()
    names = [_long(MIB, "a"), _long(MIB, "a"), _long(MIB, "b")]
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"id": f"j{i}", "prompt": "Hi", "session": n} for i, n in enumerate(names)]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    traces = tmp_path / "jobs.traces.jsonl"
    done = rrcli("run", jobs, "-p", _profile(tmp_path, sim), "-q", "--traces", traces, cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    kept = [r["session"] for r in sorted(results, key=lambda r: r["id"])]
    assert kept[0] == kept[1] != kept[2]
    assert all(len(s.encode()) <= MAX_SESSION_BYTES for s in kept)
    assert (tmp_path / "jobs.results.jsonl").stat().st_size < 64 * 1024
    assert traces.stat().st_size < 64 * 1024


def test_pool_keeps_a_huge_session_name_short(tmp_path, sim_server):
    """``pool.chat(session=...)`` with a 1 MiB name: the record's session is at most
    MAX_SESSION_BYTES bytes and begins as the name does."""
    sim = sim_server()

    async def main():
        async with library.Pool.from_profile(_profile(tmp_path, sim)) as pool:
            return await pool.chat(HI, session=_long(MIB, "z"))

    record = asyncio.run(main())
    assert "ok" == record["status"]
    assert len(record["session"].encode()) <= MAX_SESSION_BYTES
    assert record["session"].startswith("sss")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.text(min_size=1, max_size=3), st.text(min_size=1, max_size=3))
def test_session_name_is_short_and_tells_long_names_apart(start, a, b):
    """A name of at most MAX_SESSION_BYTES bytes is kept as it is, a longer one as at most
    that many bytes; two long names that differ only at their end are kept apart."""
    for name in (start + a, start + b):
        kept = session_name(name)
        size = len(name.encode("utf-8", "surrogatepass"))
        assert len(kept.encode("utf-8", "surrogatepass")) <= MAX_SESSION_BYTES
        assert (kept == name) == (size <= MAX_SESSION_BYTES)
    long = "é" * MAX_SESSION_BYTES
    assert (session_name(long + a) == session_name(long + b)) == (a == b)
