"""Budgets end to end (SPEC §13): `rrcli run --max-cost` against real sim servers with prices.

Each call reserves its worst case before it is sent and settles at its usage; the run halts
(exit 3) before a reservation would pass the limit, and the traces' cost is what was settled.
"""

from __future__ import annotations

import re

import orjson
import pytest
from runkit import Terminal, calls, read_jsonl, rrcli, write_profile

PRICE = {"input": 200.0, "output": 1000.0}  # USD per million tokens: a job costs cents
MESSAGE = re.compile(
    r"rrcli: budget reached: \$(\d+\.\d\d) of \$(\d+\.\d\d) spent; (\d+) jobs not run — "
    r"each call reserves its worst case \(the smallest \$\d+\.\d{4}\) before it is sent, and a "
    r"smaller max_tokens lowers it; raise --max-cost and --resume"
)


def priced_profile(tmp_path, servers, **top):
    backends = [
        {"id": f"b{i}", "base_url": s.openai_url, "max_concurrency": 4, "price": PRICE}
        for i, s in enumerate(servers)
    ]
    return write_profile(tmp_path / "p.toml", backends, **top)


def write_capped_jobs(path, n, max_tokens=40):
    with open(path, "wb") as f:
        for i in range(n):
            job = {
                "id": f"j{i}",
                "prompt": f"question {i} " * 8,
                "params": {"max_tokens": max_tokens},
            }
            f.write(orjson.dumps(job) + b"\n")
    return path


def traces_cost(path):
    """USD of the call records: their tokens at the run record's prices."""
    prices = {}
    total = 0.0
    for record in read_jsonl(path):
        if record["event"] == "run":
            for b in record["profile"]["backends"]:
                prices[(record["run_id"], b["id"])] = b["price"]
        elif record["event"] == "call":
            price = prices[(record["run_id"], record["deployment"])]
            total += (record["input_tokens"] or 0) * price["input"]
            total += (record["output_tokens"] or 0) * price["output"]
    return total / 1e6


def run_ends(path):
    return [r for r in read_jsonl(path) if r["event"] == "run_end"]


def test_the_budget_is_never_passed_and_the_run_exits_3(tmp_path, sim_server):
    """With a budget for about a third of the jobs: the run stops dispatching, exits 3 with the
    message naming the spend and the jobs not run, leaves those jobs without a result, and the
    traces' cost (what was settled) stays within the budget and equals run_end's spend."""
    servers = [sim_server(latency_ms=20, output_tokens=30, seed=i) for i in range(2)]
    profile = priced_profile(tmp_path, servers)
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 90)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "1", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    found = MESSAGE.search(done.stderr)
    assert found is not None, done.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert 0 < len(results) < 90
    assert {"ok"} == {r["status"] for r in results}
    assert 90 - len(results) == int(found[3])
    spent = traces_cost(tmp_path / "jobs.traces.jsonl")
    assert spent <= 1.0
    (end,) = run_ends(tmp_path / "jobs.traces.jsonl")
    assert pytest.approx(spent, abs=1e-6) == end["budget"]["spent"]
    assert 1.0 == end["budget"]["limit"]
    assert f"{end['budget']['spent']:.2f}" == found[1]
    assert sum(s.stats()["requests"] for s in servers) == len(calls(tmp_path / "jobs.traces.jsonl"))


def test_resume_with_a_raised_budget_counts_the_earlier_spend_and_finishes(tmp_path, sim_server):
    """`--resume --max-cost` covers the whole results file: raised a little, the run stops
    again with the total spend within the new limit; raised enough, every job ends ok once."""
    server = sim_server(latency_ms=10, output_tokens=30)
    profile = priced_profile(tmp_path, [server])
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 60)
    assert (
        3 == rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.5", cwd=tmp_path).returncode
    )
    again = rrcli("run", jobs, "-p", profile, "-q", "--resume", "--max-cost", "1", cwd=tmp_path)
    assert 3 == again.returncode, again.stderr
    traces = tmp_path / "jobs.traces.jsonl"
    assert traces_cost(traces) <= 1.0
    assert pytest.approx(traces_cost(traces), abs=1e-6) == run_ends(traces)[-1]["budget"]["spent"]
    last = rrcli("run", jobs, "-p", profile, "-q", "--resume", "--max-cost", "50", cwd=tmp_path)
    assert 0 == last.returncode, last.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert sorted(f"j{i}" for i in range(60)) == sorted(r["id"] for r in results)
    assert traces_cost(traces) <= 50.0


def test_the_profile_budget_applies_and_max_cost_overrides_it(tmp_path, sim_server):
    """`[budget] max_cost_usd` halts a run as --max-cost does; --max-cost wins over it."""
    server = sim_server(output_tokens=30)
    profile = priced_profile(tmp_path, [server], budget={"max_cost_usd": 0.3})
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 30)
    done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert "of $0.30 spent" in done.stderr
    wide = rrcli("run", jobs, "-p", profile, "-q", "--overwrite", "--max-cost", "100", cwd=tmp_path)
    assert 0 == wide.returncode, wide.stderr
    assert 30 == len(read_jsonl(tmp_path / "jobs.results.jsonl"))


def test_a_budget_with_an_unpriced_backend_sends_nothing(tmp_path, sim_server):
    """A budget over a backend with no price is a usage error (exit 2) naming the backend and
    the fix, before any request."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "priced", "base_url": server.openai_url, "price": PRICE},
         {"id": "free-ish", "base_url": server.openai_url}],
    )  # fmt: skip
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 5)
    done = rrcli("run", jobs, "-p", profile, "--max-cost", "5", cwd=tmp_path)
    assert 2 == done.returncode
    assert "no price for free-ish" in done.stderr
    assert "price = { input = ..., output = ... }" in done.stderr
    assert 0 == server.stats()["requests"]
    assert not (tmp_path / "jobs.results.jsonl").exists()


@pytest.mark.parametrize("value", ["-1", "abc", "nan", "inf", ""])
def test_a_bad_max_cost_is_a_usage_error(tmp_path, value):
    """A negative, non-numeric or infinite --max-cost is refused with exit 2, naming the value."""
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 1)
    done = rrcli("run", jobs, "-p", "demo", "--max-cost", value, cwd=tmp_path)
    assert 2 == done.returncode
    assert "--max-cost" in done.stderr
    assert not (tmp_path / "jobs.results.jsonl").exists()


def test_the_live_display_shows_spend_and_budget(tmp_path, sim_server):
    """On a terminal the progress line shows what was spent, what calls in flight reserved and
    what is left of the budget."""
    server = sim_server(latency_ms=300, output_tokens=30)
    profile = priced_profile(tmp_path, [server])
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 12)
    terminal = Terminal("run", jobs, "-p", profile, "--max-cost", "7.5", cwd=tmp_path)
    assert terminal.wait_for("of $7.50"), terminal.text
    assert 0 == terminal.finish()
    pattern = r"spent \$\d+\.\d\d  reserved \$\d+\.\d\d  left \$\d+\.\d\d of \$7\.50"
    assert re.search(pattern, terminal.text)


def test_dry_run_estimates_input_and_output_cost_with_a_total(tmp_path, sim_server):
    """--dry-run prints each deployment's estimated input and output cost (output at each
    job's max_tokens, else the backend's, else the documented default, saying which) and a
    total row that sums them; nothing is sent."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "price": {"input": 1.0, "output": 2.0}},
         {"id": "b", "base_url": server.openai_url, "price": {"input": 3.0, "output": 4.0},
          "params": {"max_tokens": 100}}],
    )  # fmt: skip
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"id": f"j{i}", "prompt": "x" * 36, "params": {"max_tokens": 1000}} for i in range(2)]
    lines += [{"id": f"k{i}", "prompt": "x" * 36} for i in range(2)]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    result = rrcli("run", jobs, "-p", profile, "--dry-run", cwd=tmp_path, env={"COLUMNS": "200"})
    assert 0 == result.returncode, result.stderr
    assert 0 == server.stats()["requests"]
    rows = {
        r[0]: r
        for r in (line.replace("│", " ").split() for line in result.stdout.splitlines())
        if r
    }
    # round robin: j0 a, j1 b, k0 a, k1 b; each prompt 36 chars + 4 framing = 13 tokens
    assert ["2", "26", "17,384"] == rows["a"][2:5]  # 1000 (job) + 16,384 (the default)
    assert ["2", "26", "1,100"] == rows["b"][2:5]  # 1000 (job) + 100 (the backend's)
    # a: 26 * 1.0 / 1e6 in, 17,384 * 2.0 / 1e6 out; b: 26 * 3.0 / 1e6 in, 1,100 * 4.0 / 1e6 out;
    # four decimals, more for an amount that needs them for two significant figures
    assert ["0.000026", "0.0348", "0.0348"] == rows["a"][5:8]
    assert ["4", "52", "18,484", "0.0001", "0.0392", "0.0393"] == rows["total"][1:7]
    assert "2 from the job's max tokens; 1 from the backend's params; 1 from the default of " \
        "16,384" in result.stdout  # fmt: skip


def test_stats_shows_the_priced_share_never_a_free_call(tmp_path, sim_server):
    """A run over a priced and an unpriced backend: stats' cost counts the priced calls only
    and says their share ("50 % of calls priced"); --json has priced_calls, and cost_usd null
    for the unpriced deployment."""
    server = sim_server(output_tokens=10)
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "price": PRICE},
         {"id": "b", "base_url": server.openai_url}],
    )  # fmt: skip
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 10)
    assert 0 == rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path).returncode
    traces = tmp_path / "jobs.traces.jsonl"
    text = rrcli("stats", traces, cwd=tmp_path, env={"COLUMNS": "250"})
    assert 0 == text.returncode, text.stderr
    assert "(50 % of calls priced)" in text.stdout
    summary = orjson.loads(rrcli("stats", traces, "--json", cwd=tmp_path).stdout)
    groups = {g["key"]: g for g in summary["groups"]}
    assert (5, None) == (groups["b"]["calls"], groups["b"]["cost_usd"])
    assert (0, 5) == (groups["b"]["priced_calls"], groups["a"]["priced_calls"])
    assert (10, 5) == (summary["total"]["calls"], summary["total"]["priced_calls"])
    a_calls = [c for c in calls(traces) if c["deployment"] == "a"]
    cost = sum(c["input_tokens"] * 200 + c["output_tokens"] * 1000 for c in a_calls) / 1e6
    assert round(cost, 6) == summary["total"]["cost_usd"]


def test_validate_names_the_backends_without_a_price(tmp_path, sim_server):
    """validate says which backends have no price (text and --json), and which price it took
    from the profile."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "price": PRICE},
         {"id": "b", "base_url": server.openai_url}],
    )  # fmt: skip
    text = rrcli("validate", profile, cwd=tmp_path)
    assert "price: no price for b —" in text.stdout
    document = orjson.loads(rrcli("validate", profile, "--json", cwd=tmp_path).stdout)
    assert {"a": {**PRICE, "source": "profile"}, "b": None} == document["prices"]


def test_validate_says_the_cache_prices_genai_prices_knows(tmp_path):
    """A backend priced by genai-prices (Anthropic's API): validate says its input and output
    prices and its cache read and write prices, and --json has them; nothing is sent."""
    pytest.importorskip("genai_prices")
    key, env = {"api_key_env": "RRCLI_TEST_KEY"}, {"RRCLI_TEST_KEY": "sk-test"}
    entry = {"id": "c", "provider": "anthropic", "base_url": "https://api.anthropic.com",
             "model": "claude-sonnet-4-5", "credentials": key}  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", [entry])
    text = rrcli("validate", profile, cwd=tmp_path, env=env)
    assert ("price: c: $3 / $15 per million input / output tokens, $0.3 cache reads, $3.75 "
            "cache writes (genai-prices)") in text.stdout  # fmt: skip
    document = orjson.loads(rrcli("validate", profile, "--json", cwd=tmp_path, env=env).stdout)
    expected = {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75}
    assert {**expected, "source": "genai-prices"} == document["prices"]["c"]


def test_a_profile_budget_over_an_unpriced_backend_is_a_profile_error(tmp_path, sim_server):
    """`[budget] max_cost_usd` with a backend that has no price: validate reports an error at
    budget.max_cost_usd naming the backend, and run refuses the profile (exit 2), nothing sent."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "price": PRICE},
         {"id": "b", "base_url": server.openai_url}],
        budget={"max_cost_usd": 1.0},
    )  # fmt: skip
    report = orjson.loads(rrcli("validate", profile, "--json", cwd=tmp_path).stdout)
    assert ["budget.max_cost_usd"] == [e["path"] for e in report["errors"]]
    assert "no price for b" in report["errors"][0]["message"]
    jobs = write_capped_jobs(tmp_path / "jobs.jsonl", 3)
    done = rrcli("run", jobs, "-p", profile, cwd=tmp_path)
    assert 2 == done.returncode
    assert "no price for b" in done.stderr
    assert 0 == server.stats()["requests"]
