"""Hostile profiles: caps that would take the machine, and headers that would desync the wire
(docs/reliability.md). Each is refused before anything is sent, or costs only what the jobs in
flight need.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hostile import chat
from runkit import read_jsonl, rrcli, write_jobs, write_profile

from rrcli.config.load import load_profile
from rrcli.config.profile import MAX_IN_FLIGHT
from rrcli.running.options import RunOptions
from rrcli.running.runner import run


def profile_for(tmp_path: Path, server, top=None, **backend) -> Path:
    backends = [{"id": "h", "base_url": server.openai_url, **backend}]
    return write_profile(tmp_path / "p.toml", backends, **(top or {}))


# --- 9. bounded resources from the profile -------------------------------------------------


@pytest.mark.parametrize(
    ("top", "backend", "where"),
    [
        ({}, {"max_concurrency": 10**7}, "max_concurrency: must be at most 10000"),
        ({"concurrency": 10**7}, {}, "concurrency: must be at most 10000"),
    ],
)
def test_an_absurd_cap_is_a_profile_error_naming_the_limit(
    tmp_path, hostile_server, top, backend, where
):
    """``max_concurrency`` or ``concurrency`` of 10^7 is a profile error naming the limit, for
    ``validate`` (exit 1) and ``run`` (exit 2, nothing sent)."""
    server = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, server, top, **backend)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    for code, args in ((1, ("validate", profile)), (2, ("run", jobs, "-p", profile))):
        result = rrcli(*args, cwd=tmp_path)
        assert code == result.returncode, result.stderr
        assert where in result.stdout + result.stderr
    assert [] == server.requests


def test_an_absurd_concurrency_option_is_a_usage_error(tmp_path, hostile_server):
    """``--concurrency 10000000`` is refused (exit 2) naming the limit; nothing is sent."""
    server = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    result = rrcli("run", jobs, "-p", profile, "--concurrency", "10000000", cwd=tmp_path)
    assert 2 == result.returncode
    assert f"{MAX_IN_FLIGHT}" in result.stderr
    assert [] == server.requests


def test_workers_are_bounded_by_the_jobs_in_flight_not_by_the_cap(tmp_path, hostile_server):
    """A pool whose cap is the limit (10,000) runs 30 jobs on about 30 tasks, not 10,000: a
    worker starts only when a job is handed out, and every job still ends ok."""
    server = hostile_server(lambda _: chat(delay=0.2))
    path = profile_for(tmp_path, server, {"concurrency": MAX_IN_FLIGHT}, max_concurrency=10_000)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 30)
    options = RunOptions(jobs=jobs, out=tmp_path / "r.jsonl", traces=tmp_path / "t.jsonl")
    most = 0

    async def main() -> None:
        nonlocal most
        running = asyncio.create_task(run(load_profile(path), options))
        while not running.done():
            most = max(most, len(asyncio.all_tasks()))
            await asyncio.sleep(0.01)
        await running

    asyncio.run(main())
    assert 30 == len(server.requests)
    assert most < 60
    assert {"ok"} == {r["status"] for r in read_jsonl(tmp_path / "r.jsonl")}


# --- 12. request framing headers -----------------------------------------------------------


@pytest.mark.parametrize(
    "header", ["Content-Length", "Transfer-Encoding", "Host", "Connection", "content-length"]
)
def test_framing_headers_are_refused_like_a_key_header(tmp_path, hostile_server, header):
    """``headers`` naming Content-Length, Transfer-Encoding, Host or Connection (any case) is a
    profile error at that header, for ``validate`` (exit 1) and ``run`` (exit 2): the server
    never reads a body framed by a stale length."""
    server = hostile_server(lambda _: chat())
    profile = profile_for(tmp_path, server, headers={header: "5"})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    for code, args in ((1, ("validate", profile)), (2, ("run", jobs, "-p", profile))):
        result = rrcli(*args, cwd=tmp_path)
        assert code == result.returncode, result.stderr
        assert f'headers.{header}: header "{header}" frames the request' in (
            result.stdout + result.stderr
        )
    assert [] == server.requests
