"""The response cache (``--cache PATH``, SPEC §13) through the CLI against real sim servers: a
repeated request is answered from the SQLite file without a call, and a file that cannot be a
cache is refused before anything is sent."""

from __future__ import annotations

import sqlite3
import stat

import orjson
from runkit import calls, popen, read_jsonl, rrcli, write_jobs, write_profile


def _by_id(path):
    return {line["id"]: line for line in read_jsonl(path)}


def _answer(line):
    """What a result says, apart from how it was obtained (time, cache, which backend)."""
    skip = {"latency_ms", "cached", "deployment"}
    return {k: v for k, v in line.items() if k not in skip}


def _requests(*servers):
    return sum(server.stats()["requests"] for server in servers)


def test_second_run_sends_nothing_and_gives_the_same_outputs(tmp_path, sim_server):
    """A second run of the same jobs with the same --cache sends no request to any backend
    (both servers' counters stay at 0), and every result equals the first run's, marked
    ``"cached": true``; the trace has one call record a job with outcome ``cached``, zero
    latency and no queue time."""
    one, two = sim_server(latency_ms=5, seed=1), sim_server(latency_ms=5, seed=2)
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": one.openai_url}, {"id": "b", "base_url": two.openai_url}],
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 30)
    cache = tmp_path / "answers.sqlite"
    first = rrcli("run", jobs, "-p", profile, "--cache", cache, cwd=tmp_path)
    assert 0 == first.returncode, first.stderr
    assert 30 == _requests(one, two)
    one.reset(), two.reset()

    second = rrcli(
        "run", jobs, "-p", profile, "--cache", cache, "--out", "again.jsonl",
        "--traces", "again.traces.jsonl", cwd=tmp_path,
    )  # fmt: skip
    assert 0 == second.returncode, second.stderr
    assert 0 == _requests(one, two)
    before, after = _by_id(tmp_path / "jobs.results.jsonl"), _by_id(tmp_path / "again.jsonl")
    assert {k: _answer(v) for k, v in before.items()} == {k: _answer(v) for k, v in after.items()}
    assert {True} == {line["cached"] for line in after.values()}
    records = calls(tmp_path / "again.traces.jsonl")
    assert 30 == len(records)
    assert {("cached", 0.0, 0.0)} == {
        (r["outcome"], r["latency_ms"], r["queue_ms"]) for r in records
    }
    assert "30 calls answered from the cache" in second.stderr


def test_stream_is_not_part_of_the_key(tmp_path, sim_server):
    """Answers stored by a plain run answer the same jobs run with --stream."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 5)
    assert 0 == rrcli("run", jobs, "-p", profile, "--cache", "c.db", cwd=tmp_path).returncode
    server.reset()
    streamed = rrcli(
        "run", jobs, "-p", profile, "--cache", "c.db", "--stream", "--out", "s.jsonl", cwd=tmp_path
    )
    assert 0 == streamed.returncode, streamed.stderr
    assert 0 == server.stats()["requests"]
    assert 5 == sum(line.get("cached", False) for line in read_jsonl(tmp_path / "s.jsonl"))


def test_a_backend_of_another_model_is_another_key(tmp_path, sim_server):
    """The key holds the model the request names: answers stored from a backend serving model
    ``m1`` answer nothing for a backend serving ``m2``, whose server gets every job; a backend
    of ``m1`` with another id (another server) shares them."""
    first, other, same = sim_server(), sim_server(), sim_server()
    jobs = write_jobs(tmp_path / "jobs.jsonl", 6)
    p1 = write_profile(
        tmp_path / "p1.toml", [{"id": "a", "base_url": first.openai_url, "model": "m1"}]
    )
    p2 = write_profile(
        tmp_path / "p2.toml", [{"id": "b", "base_url": other.openai_url, "model": "m2"}]
    )
    p3 = write_profile(
        tmp_path / "p3.toml", [{"id": "c", "base_url": same.openai_url, "model": "m1"}]
    )
    assert 0 == rrcli("run", jobs, "-p", p1, "--cache", "c.db", cwd=tmp_path).returncode
    run2 = rrcli("run", jobs, "-p", p2, "--cache", "c.db", "--out", "2.jsonl", cwd=tmp_path)
    assert 0 == run2.returncode, run2.stderr
    assert 6 == other.stats()["requests"]
    run3 = rrcli("run", jobs, "-p", p3, "--cache", "c.db", "--out", "3.jsonl", cwd=tmp_path)
    assert 0 == run3.returncode, run3.stderr
    assert 0 == same.stats()["requests"]
    assert {"c"} == {line["deployment"] for line in read_jsonl(tmp_path / "3.jsonl")}


def test_only_ok_answers_are_stored(tmp_path, sim_server):
    """A job that failed leaves nothing in the cache: the next run sends it again."""
    failing, healthy = sim_server(error_rate=1.0), sim_server()
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    bad = write_profile(
        tmp_path / "bad.toml",
        [{"id": "a", "base_url": failing.openai_url}],
        retry={"max_retries": 0},
    )
    good = write_profile(tmp_path / "good.toml", [{"id": "a", "base_url": healthy.openai_url}])
    assert 1 == rrcli("run", jobs, "-p", bad, "--cache", "c.db", cwd=tmp_path).returncode
    again = rrcli("run", jobs, "-p", good, "--cache", "c.db", "--out", "2.jsonl", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    assert 4 == healthy.stats()["requests"]


def test_cache_modes(tmp_path, sim_server):
    """``write`` stores without looking up (every job is sent), ``read`` looks up without
    storing, ``off`` ignores the cache; ``read`` without a cache file is a usage error."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    more = write_jobs(tmp_path / "more.jsonl", 6)

    def run(path, mode, out):
        args = ["--cache", "c.db", "--cache-mode", mode, "--out", out, "--traces", out + ".t"]
        result = rrcli("run", path, "-p", profile, *args, cwd=tmp_path)
        assert 0 == result.returncode, result.stderr

    run(jobs, "write", "w1.jsonl")
    run(jobs, "write", "w2.jsonl")
    assert 6 == server.stats()["requests"]
    server.reset()
    run(more, "read", "r1.jsonl")  # 3 stored, 3 sent and not stored
    run(more, "read", "r2.jsonl")
    assert 6 == server.stats()["requests"]
    server.reset()
    run(jobs, "off", "o.jsonl")
    assert 3 == server.stats()["requests"]
    alone = rrcli("run", jobs, "-p", profile, "--cache-mode", "read", "--out", "x", cwd=tmp_path)
    assert 2 == alone.returncode
    assert "--cache-mode read needs a cache file" in alone.stderr


def test_profile_cache_section(tmp_path, sim_server):
    """``[cache] path`` in the profile caches like --cache; ``--cache-mode off`` turns it off;
    a bad ``[cache] mode`` is a validation error naming the accepted ones."""
    server = sim_server()
    backends = [{"id": "a", "base_url": server.openai_url}]
    profile = write_profile(tmp_path / "p.toml", backends, cache={"path": "from-profile.db"})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    assert 0 == rrcli("run", jobs, "-p", profile, cwd=tmp_path).returncode
    assert 0 == rrcli("run", jobs, "-p", profile, "--out", "2.jsonl", cwd=tmp_path).returncode
    assert 4 == server.stats()["requests"]
    off = rrcli("run", jobs, "-p", profile, "--cache-mode", "off", "--out", "3.jsonl", cwd=tmp_path)
    assert 0 == off.returncode, off.stderr
    assert 8 == server.stats()["requests"]
    bad = write_profile(tmp_path / "bad.toml", backends, cache={"path": "x.db", "mode": "often"})
    checked = rrcli("validate", bad, cwd=tmp_path)
    assert 1 == checked.returncode
    assert "cache.mode" in checked.stdout + checked.stderr
    assert "readwrite" in checked.stdout + checked.stderr


def test_two_processes_writing_one_cache_lose_nothing(tmp_path, sim_server):
    """Two runs at once, each half of the jobs (--shard), store into one cache file: every
    answer is there afterwards, and a third run of all the jobs sends no request."""
    server = sim_server(latency_ms=2)
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url, "max_concurrency": 32}]
    )
    jobs = write_jobs(tmp_path / "jobs.jsonl", 600)
    procs = [
        popen("run", jobs, "-p", profile, "--cache", "c.db", "--shard", f"{i}/2",
              "--out", f"{i}.jsonl", "--traces", f"{i}.t", "-q", cwd=tmp_path)
        for i in range(2)
    ]  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert 0 == proc.returncode, err
    assert 600 == server.stats()["requests"]
    with sqlite3.connect(tmp_path / "c.db") as db:
        assert 600 == db.execute("SELECT count(*) FROM rrcli_cache").fetchone()[0]
    server.reset()
    third = rrcli("run", jobs, "-p", profile, "--cache", "c.db", "--out", "all.jsonl", cwd=tmp_path)
    assert 0 == third.returncode, third.stderr
    assert 0 == server.stats()["requests"]


def _refused(tmp_path, server, cache, *extra):
    """Run with ``cache``: it must exit 2 before anything is sent or written."""
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    result = rrcli("run", jobs, "-p", profile, "--cache", cache, *extra, cwd=tmp_path)
    assert 2 == result.returncode
    assert 0 == server.stats()["requests"]
    assert not (tmp_path / "jobs.results.jsonl").exists()
    assert str(cache) in result.stderr
    return result.stderr


def test_a_file_that_is_not_sqlite_is_refused(tmp_path, sim_server):
    """A --cache file that is not an SQLite database (here: JSON Lines) is a clear error, exit
    2, naming the file and the fix; the file is left as it was."""
    cache = tmp_path / "results.jsonl"
    cache.write_bytes(b'{"id": 1}\n')
    message = _refused(tmp_path, sim_server(), cache)
    assert "not an SQLite database" in message
    assert "name another --cache file" in message
    assert b'{"id": 1}\n' == cache.read_bytes()


def test_another_programs_database_is_refused(tmp_path, sim_server):
    """An SQLite database rrcli did not create is never written into: exit 2, naming its
    tables."""
    cache = tmp_path / "app.db"
    with sqlite3.connect(cache) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    message = _refused(tmp_path, sim_server(), cache)
    assert "another program (tables: users)" in message
    with sqlite3.connect(cache) as db:
        assert [("users",)] == db.execute("SELECT name FROM sqlite_master").fetchall()


def _format(cache, layout, version):
    """A cache file made by hand: the meta table naming ``version`` and the answers' table."""
    with sqlite3.connect(cache) as db:
        db.execute("CREATE TABLE rrcli_cache_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute(f"CREATE TABLE rrcli_cache {layout}")
        db.execute("INSERT INTO rrcli_cache_meta VALUES ('format', ?)", (version,))


def test_a_format_1_cache_keeps_answering_and_storing(tmp_path, sim_server):
    """A cache of the first layout (answers in the key's own B-tree) is read and written as it
    is: its answers stored by one run are answered to the next without a request."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 20)
    cache = tmp_path / "old.db"
    layout = "(key BLOB PRIMARY KEY, model TEXT NOT NULL, answer BLOB NOT NULL, stored REAL NOT NULL) WITHOUT ROWID"  # noqa: E501
    _format(cache, layout, "1")
    assert 0 == rrcli("run", jobs, "-p", profile, "--cache", cache, cwd=tmp_path).returncode
    assert 20 == server.stats()["requests"]
    server.reset()
    again = rrcli("run", jobs, "-p", profile, "--cache", cache, "--out", "b.jsonl", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    assert 0 == server.stats()["requests"]
    with sqlite3.connect(cache) as db:
        assert ("1", 20) == (
            db.execute("SELECT value FROM rrcli_cache_meta").fetchone()[0],
            db.execute("SELECT count(*) FROM rrcli_cache").fetchone()[0],
        )


def test_a_cache_of_a_newer_format_is_refused(tmp_path, sim_server):
    """A cache a newer rrcli wrote (format 3) is refused, exit 2, naming the formats this one
    reads; nothing is written into it."""
    cache = tmp_path / "new.db"
    _format(cache, "(key BLOB PRIMARY KEY, answer BLOB)", "3")
    message = _refused(tmp_path, sim_server(), cache)
    assert "a cache of another format (3; this rrcli reads 1, 2)" in message
    with sqlite3.connect(cache) as db:
        assert 0 == db.execute("SELECT count(*) FROM rrcli_cache").fetchone()[0]


def test_a_corrupt_cache_is_refused(tmp_path, sim_server):
    """A cache whose pages are damaged is a clear error, exit 2, saying to delete it."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "fill.jsonl", 50)
    assert 0 == rrcli("run", jobs, "-p", profile, "--cache", "c.db", cwd=tmp_path).returncode
    cache = tmp_path / "c.db"
    data = bytearray(cache.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)  # the header stays; every page after it is noise
    cache.write_bytes(bytes(data))
    server.reset()
    message = _refused(tmp_path, server, cache)
    assert "delete it" in message


def test_a_read_only_cache_is_refused_unless_read_only_use_is_asked(tmp_path, sim_server):
    """A cache file without write permission is an error when answers would be stored (exit 2,
    saying chmod or --cache-mode read); with --cache-mode read its answers are used."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    fill = write_jobs(tmp_path / "fill.jsonl", 3)
    assert 0 == rrcli("run", fill, "-p", profile, "--cache", "c.db", cwd=tmp_path).returncode
    cache = tmp_path / "c.db"
    cache.chmod(stat.S_IRUSR | stat.S_IRGRP)
    server.reset()
    message = _refused(tmp_path, server, cache)
    assert "read-only" in message and "--cache-mode read" in message
    read = rrcli(
        "run", fill, "-p", profile, "--cache", cache, "--cache-mode", "read", "--out", "r.jsonl",
        cwd=tmp_path,
    )  # fmt: skip
    assert 0 == read.returncode, read.stderr
    assert 0 == server.stats()["requests"]


def test_stats_counts_cached_calls_apart(tmp_path, sim_server):
    """``rrcli stats`` counts answers from the cache in ``cached`` only: ``calls``, the latency
    percentiles and the tokens are those of the calls actually sent."""
    server = sim_server(latency_ms=3)
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10)
    assert 0 == rrcli("run", jobs, "-p", profile, "--cache", "c.db", cwd=tmp_path).returncode
    again = ("--out", "2.jsonl", "--traces", "2.t")
    assert (
        0 == rrcli("run", jobs, "-p", profile, "--cache", "c.db", *again, cwd=tmp_path).returncode
    )
    sent = orjson.loads(rrcli("stats", "jobs.traces.jsonl", "--json", cwd=tmp_path).stdout)
    both = orjson.loads(rrcli("stats", "jobs.traces.jsonl", "2.t", "--json", cwd=tmp_path).stdout)
    total = both["total"]
    assert (10, 10, 10) == (total["calls"], total["ok"], total["cached"])
    assert sent["total"]["latency_ms"] == total["latency_ms"]
    assert sent["total"]["output_tokens"] == total["output_tokens"]
    assert 0 == sent["total"]["cached"]
    table = rrcli("stats", "jobs.traces.jsonl", "2.t", cwd=tmp_path, env={"COLUMNS": "200"})
    assert "cached" in table.stdout


def test_a_session_is_answered_turn_by_turn(tmp_path, sim_server):
    """Each turn of a session is one cached call: a rerun sends nothing and each turn entry
    says ``cached``."""
    server = sim_server()
    profile = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])
    jobs = tmp_path / "s.jsonl"
    jobs.write_bytes(orjson.dumps({"id": "s", "turns": ["Hi", "And then?", "Bye"]}) + b"\n")
    assert 0 == rrcli("run", jobs, "-p", profile, "--cache", "c.db", cwd=tmp_path).returncode
    assert 3 == server.stats()["requests"]
    server.reset()
    again = rrcli("run", jobs, "-p", profile, "--cache", "c.db", "--out", "2.jsonl", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    assert 0 == server.stats()["requests"]
    [first], [second] = read_jsonl(tmp_path / "s.results.jsonl"), read_jsonl(tmp_path / "2.jsonl")
    assert [t["output"] for t in first["turns"]] == [t["output"] for t in second["turns"]]
    assert [True, True, True] == [t["cached"] for t in second["turns"]]
    assert second["cached"] is True


def test_cached_calls_are_not_spend(tmp_path, sim_server):
    """What earlier runs spent (read back from the traces for ``--resume --max-cost``) leaves
    out answers from the cache: a fully cached run spent nothing."""
    from rrcli.records.spend import traces_cost

    server = sim_server()
    priced = {"id": "a", "base_url": server.openai_url, "price": {"input": 5.0, "output": 15.0}}
    profile = write_profile(tmp_path / "p.toml", [priced])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 5)
    assert 0 == rrcli("run", jobs, "-p", profile, "--cache", "c.db", cwd=tmp_path).returncode
    again = ("--out", "2.jsonl", "--traces", "2.t")
    assert (
        0 == rrcli("run", jobs, "-p", profile, "--cache", "c.db", *again, cwd=tmp_path).returncode
    )
    assert traces_cost(tmp_path / "jobs.traces.jsonl", {}) > 0
    assert 0.0 == traces_cost(tmp_path / "2.t", {})


def _lines(path, lines):
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def test_two_embeddings_of_different_texts_are_two_keys(tmp_path, sim_server):
    """The key holds a non-chat job's ``input``: an embedding of one text stored by one run
    answers nothing for another text, which is sent and gets a vector of its own; the first
    text again is answered from the cache."""
    server = sim_server()
    backend = {"id": "e", "base_url": server.openai_url, "endpoints": ["embeddings"]}
    profile = write_profile(tmp_path / "p.toml", [backend])

    def embed(name, text):
        jobs = _lines(
            tmp_path / f"{name}.jsonl", [{"id": "e1", "endpoint": "embeddings", "input": text}]
        )
        run = rrcli("run", jobs, "-p", profile, "--cache", "c.db", cwd=tmp_path)
        assert 0 == run.returncode, run.stderr
        (line,) = read_jsonl(tmp_path / f"{name}.results.jsonl")
        return line

    first = embed("one", "the first text")
    other = embed("two", "a second, different text")
    again = embed("three", "the first text")
    assert 2 == server.stats()["paths"]["/v1/embeddings"]
    assert (False, False, True) == tuple(
        line.get("cached", False) for line in (first, other, again)
    )
    assert first["embeddings"] != other["embeddings"]
    assert first["embeddings"] == again["embeddings"]


def test_backends_of_one_model_with_other_params_are_other_keys(tmp_path, sim_server):
    """Backends serving one model with different ``params`` send different requests, so each
    stores its answers under its own key: after a run over both, a run on the first alone is
    answered from the cache for exactly the jobs that backend served, and sends the others."""
    cold, warm = sim_server(seed=1), sim_server(seed=2)
    backends = [
        {"id": "cold", "base_url": cold.openai_url, "params": {"temperature": 0}},
        {"id": "warm", "base_url": warm.openai_url, "params": {"temperature": 1}},
    ]
    jobs = write_jobs(tmp_path / "jobs.jsonl", 8)
    both = write_profile(tmp_path / "both.toml", backends)
    run = rrcli("run", jobs, "-p", both, "--cache", "c.db", cwd=tmp_path)
    assert 0 == run.returncode, run.stderr
    served = {
        line["id"]: line["deployment"] for line in read_jsonl(tmp_path / "jobs.results.jsonl")
    }
    assert {"cold", "warm"} == set(served.values())
    cold.reset()

    alone = write_profile(tmp_path / "cold.toml", backends[:1])
    again = rrcli("run", jobs, "-p", alone, "--cache", "c.db", "--out", "2.jsonl", cwd=tmp_path)
    assert 0 == again.returncode, again.stderr
    cached = {line["id"] for line in read_jsonl(tmp_path / "2.jsonl") if line.get("cached")}
    assert {job for job, by in served.items() if by == "cold"} == cached
    assert list(served.values()).count("warm") == cold.stats()["requests"]
