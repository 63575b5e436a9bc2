"""strategy = "cache_aware" through the CLI against ``rrcli sim`` replicas that keep a prefix
cache (their replies included): multi-turn sessions whose turns interleave stay where their
history is warm, prompts that share nothing spread as least_loaded spreads them, and a resumed
run still has one ok line per job."""

from __future__ import annotations

import collections
import random

import orjson
from runkit import read_jsonl, rrcli, run_on_replicas, write_profile

from rrcli.config.profile import SimSettings
from rrcli.sim.behaviour import SimBehaviour

SESSIONS, TURNS = 6, 4


def session_jobs() -> list[dict]:
    """Each turn of SESSIONS sessions a job of its own with its whole history (the replies the
    sim writes to the earlier turns included), every session open at once and each round of
    turns shuffled, as agents' turns arrive among other sessions' turns."""
    replies = SimBehaviour(SimSettings(), random.Random(0))
    rounds: list[list[dict]] = [[] for _ in range(TURNS)]
    for s in range(SESSIONS):
        messages = [{"role": "system", "content": f"Session {s} keeps its own notes. " * 40}]
        for t in range(TURNS):
            messages.append({"role": "user", "content": f"Session {s}, turn {t}: and then?"})
            rounds[t].append({"id": f"s{s}-{t}", "messages": list(messages)})
            reply = replies.text(replies.variant(messages))
            messages.append({"role": "assistant", "content": reply})
    shuffle = random.Random(3).shuffle
    for jobs in rounds:
        shuffle(jobs)
    return [job for jobs in rounds for job in jobs]


def sessions_run(sim_server, tmp_path, strategy: str) -> tuple[list[int], float]:
    """The session jobs on three fresh replicas: (deployments serving each session, cached ÷
    input tokens over the calls)."""
    servers = [sim_server(prefix_cache_tokens=4000) for _ in range(3)]
    served: dict[str, set[str]] = collections.defaultdict(set)
    cached = given = 0
    for result in run_on_replicas(tmp_path, servers, strategy, session_jobs()):
        served[result["id"].partition("-")[0]].add(result["deployment"])
        cached += result["usage"]["cached_input_tokens"]
        given += result["usage"]["input_tokens"]
    return sorted(len(where) for where in served.values()), cached / given


def test_interleaved_sessions_stay_where_their_history_is_warm(sim_server, tmp_path):
    """Six sessions open at once, their turns interleaved: cache_aware sends every turn of a
    session to the replica that holds its history (the last reply too), so all but each
    session's first turn and newest message are cached; least_loaded moves sessions between
    replicas and caches far less."""
    warm_spread, warm = sessions_run(sim_server, tmp_path, "cache_aware")
    cold_spread, cold = sessions_run(sim_server, tmp_path, "least_loaded")
    assert [1] * SESSIONS == warm_spread
    assert max(cold_spread) > 1
    assert warm > 0.7
    assert warm > cold + 0.2


def spread(sim_server, tmp_path, strategy: str) -> list[int]:
    """30 prompts of one length sharing no prefix, one at a time, on three replicas: the calls
    each replica took."""
    servers = [sim_server(prefix_cache_tokens=4000) for _ in range(3)]
    backends = [{"id": f"r{i}", "base_url": s.openai_url} for i, s in enumerate(servers)]
    profile = write_profile(
        tmp_path / f"{strategy}.toml", backends, strategy=strategy, concurrency=1
    )
    jobs = tmp_path / f"{strategy}.jsonl"
    lines = [{"id": f"q{i}", "prompt": f"{i:03d} " + "word " * 60} for i in range(30)]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    results = read_jsonl(tmp_path / f"{strategy}.results.jsonl")
    taken = collections.Counter(r["deployment"] for r in results)
    return [taken[f"r{i}"] for i in range(3)]


def test_prompts_sharing_nothing_spread_as_least_loaded_spreads_them(sim_server, tmp_path):
    """With no shared prefix cache_aware is least_loaded: the replicas take the calls in turn,
    ten each of thirty, as least_loaded gives them."""
    assert [10, 10, 10] == spread(sim_server, tmp_path, "least_loaded")
    assert [10, 10, 10] == spread(sim_server, tmp_path, "cache_aware")


def test_a_resumed_cache_aware_run_has_one_ok_line_per_job(sim_server, tmp_path):
    """The lookahead reorders jobs, not their results: a run stopped after some jobs
    (``--limit``) and resumed ends with exactly one ok line for every job."""
    server = sim_server(prefix_cache_tokens=4000)
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "r", "base_url": server.openai_url}],
        strategy="cache_aware", concurrency=2,
    )  # fmt: skip
    jobs = tmp_path / "jobs.jsonl"
    lines = [
        {"id": f"q{i}", "system": f"System {i % 3}. " * 30, "prompt": f"q{i}"} for i in range(24)
    ]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    first = rrcli("run", jobs, "-p", profile, "-q", "--limit", "10", cwd=tmp_path)
    assert 0 == first.returncode, first.stderr
    again = rrcli("run", jobs, "-p", profile, "-q", "--resume", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    ok = collections.Counter(
        r["id"] for r in read_jsonl(tmp_path / "jobs.results.jsonl") if r["status"] == "ok"
    )
    assert {f"q{i}": 1 for i in range(24)} == dict(ok)
