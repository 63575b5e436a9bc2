"""Budgets against a server that bills what it reads and writes (tests/billing.py): whatever the
server reports, and however calls end, what it billed stays within `--max-cost`, and the run
uses the budget instead of stopping while most of it is left.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from billing import GPT_4O
from runkit import calls, read_jsonl, rrcli, write_profile


def billed_profile(tmp_path, server, cap=64, top=None, **backend):
    entry = {"id": "b0", "base_url": server.openai_url, "model": "gpt-4o", "price": GPT_4O,
             "max_concurrency": cap, **backend}  # fmt: skip
    return write_profile(tmp_path / "p.toml", [entry], **(top or {}))


def write_jobs(path, n, prompt="q", **params):
    with open(path, "wb") as f:
        for i in range(n):
            job = {"id": f"j{i}", "prompt": f"{prompt}{i}", "params": params}
            f.write(orjson.dumps(job) + b"\n")
    return path


def run_end(traces):
    (end,) = [r for r in read_jsonl(traces) if r["event"] == "run_end"]
    return end


def test_a_budget_far_above_the_spend_runs_every_job(tmp_path, billing_server):
    """2,000 short jobs, 64 in flight, each capped at 16,384 output tokens (a worst case of
    $0.16) and really costing about $0.0001, with `--max-cost 5`: every job runs (calls whose
    worst case does not fit yet wait for others to settle), exit 0, and no more was billed."""
    server = billing_server(writes=5)
    profile = billed_profile(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2000, max_tokens=16_384)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "5", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert 2000 == sum(r["status"] == "ok" for r in results)
    end = run_end(tmp_path / "jobs.traces.jsonl")
    assert server.billed() == pytest.approx(end["budget"]["spent"], abs=1e-6)
    assert 4.0 < end["budget"]["reserved_peak"] <= 5.0  # the budget was used, not fled


def test_a_binding_budget_is_spent_to_the_last_call_and_never_passed(tmp_path, billing_server):
    """Calls capped at 64 tokens and `--max-cost 0.1`: the run halts (exit 3) only once what is
    left cannot cover one more call: at least 90 % of the limit was billed, never more than it;
    the message says what was spent and what lowers a reservation, and no Ctrl-C line is shown
    since no one pressed it."""
    server = billing_server(writes=5)
    profile = billed_profile(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2000, max_tokens=64)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.1", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert 0.09 <= server.billed() <= 0.1
    assert "a smaller max_tokens lowers it" in done.stderr
    assert "Ctrl-C" not in done.stderr
    end = run_end(tmp_path / "jobs.traces.jsonl")
    assert server.billed() == pytest.approx(end["budget"]["spent"], abs=1e-6)
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert f"{2000 - len(results)} jobs not run" in done.stderr
    charged = sum(c["cost_usd"] for c in calls(tmp_path / "jobs.traces.jsonl"))
    assert charged == pytest.approx(end["budget"]["spent"], abs=1e-6)


def test_replies_without_usage_cost_their_reservation_and_resume_counts_it(
    tmp_path, billing_server
):
    """A server that reports no usage: each call is charged its reservation (the trace says
    `cost_estimated`, and its estimated tokens say `usage_estimated`), so the run stops within
    the limit of what was billed; `--resume` with a raised limit counts those charges, not the
    estimated tokens, and the two runs together were billed within the raised limit."""
    server = billing_server(writes=64, usage=False)
    profile = billed_profile(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 400, max_tokens=64)
    first = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.05", cwd=tmp_path)
    assert 3 == first.returncode, first.stderr
    assert server.billed() <= 0.05
    records = calls(tmp_path / "jobs.traces.jsonl")
    assert {(True, True)} == {(c["usage_estimated"], c["cost_estimated"]) for c in records}
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert {True} == {r["usage"]["usage_estimated"] for r in results}
    again = rrcli("run", jobs, "-p", profile, "-q", "--resume", "--max-cost", "0.1", cwd=tmp_path)
    assert 3 == again.returncode, again.stderr
    assert 0.05 < server.billed() <= 0.1


def test_failed_attempts_cost_nothing_and_leave_the_budget_to_the_jobs(tmp_path, billing_server):
    """A server that answers every third request 503 (no provider bills it): the failed
    attempts' reservations are given back, so a budget that covers every job's worst case
    runs them all (exit 0), with the failed attempts charged $0 in the trace."""
    server = billing_server(writes=5, fail_every=3)
    top = {"retry": {"max_retries": 20}, "cooldown": {"consecutive_failures": 0}}
    profile = billed_profile(tmp_path, server, cap=16, top=top)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 300, max_tokens=64)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.05", cwd=tmp_path, timeout=60)
    assert 0 == done.returncode, done.stderr
    assert 300 == len(read_jsonl(tmp_path / "jobs.results.jsonl"))
    failed = [c for c in calls(tmp_path / "jobs.traces.jsonl") if c["http_status"] == 503]
    assert failed and {0.0} == {c["cost_usd"] for c in failed}
    assert server.billed() <= 0.05


def test_long_prompts_are_reserved_at_their_bound_not_their_estimate(tmp_path, billing_server):
    """Prompts of 4,000 characters that a provider may bill a token a character: each call is
    reserved at that bound, not at the four-characters-a-token estimate, so 64 calls in flight
    never take the spend past the limit."""
    server = billing_server(writes=1)
    profile = billed_profile(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 200, prompt="7" * 4000, max_tokens=1)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.5", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert 0.45 <= server.billed() <= 0.5


def test_streams_cut_after_tokens_came_are_charged_what_they_may_have_cost(
    tmp_path, billing_server
):
    """Streams that break after 2,000 generated tokens (billed by the provider) and are
    retried: each broken attempt is charged its reservation, so what was billed stays within
    the limit and run_end's spend is not zero."""
    server = billing_server(writes=4000, cut_after=2000)
    profile = billed_profile(tmp_path, server, cap=8)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 40, max_tokens=4000)
    done = rrcli("run", jobs, "-p", profile, "-q", "--stream", "--max-cost", "1", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert 0.3 < server.billed() <= 1.0
    assert run_end(tmp_path / "jobs.traces.jsonl")["budget"]["spent"] >= server.billed()


def write_lines(path, lines):
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def test_calls_without_a_cap_are_sent_with_the_models_most_output(tmp_path, billing_server):
    """No max_tokens anywhere and a model that would write 40,000 tokens: with a budget each
    call goes out capped at gpt-4o's documented most output (16,384), reserved at it, and what
    was billed stays within the limit."""
    server = billing_server(writes=40_000)
    profile = billed_profile(tmp_path, server, cap=8)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 40)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "3", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert {16_384} == {body["max_tokens"] for body in server.requests}
    assert 2.5 < server.billed() <= 3.0


def test_a_budget_over_a_model_of_unknown_output_sends_no_uncapped_call(tmp_path, billing_server):
    """A model whose most output nothing tells, and jobs without max_tokens: exit 2 naming the
    backend and the setting to add, and no request sent."""
    server = billing_server()
    profile = billed_profile(tmp_path, server, model="my-local-model")
    jobs = write_jobs(tmp_path / "jobs.jsonl", 5)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "3", cwd=tmp_path)
    assert 2 == done.returncode, done.stderr
    assert "backend b0:" in done.stderr and "set params.max_tokens on the backend" in done.stderr
    assert [] == server.requests


def media_jobs(folder: Path, text: str, part: dict, count: int) -> Path:
    """A jobs file of ``count`` chat jobs, each a question with one media ``part``, capped at 10
    output tokens."""
    content = [{"type": "text", "text": text}, part]
    lines = [{"id": f"j{i}", "messages": [{"role": "user", "content": content}],
              "params": {"max_tokens": 10}} for i in range(count)]  # fmt: skip
    return write_lines(folder / "jobs.jsonl", lines)


def test_images_are_reserved_at_their_most_not_their_url(tmp_path, billing_server):
    """Jobs with a short image URL, billed as an image is (1,100 tokens): each call is
    reserved at an image's most, so what was billed stays within the limit."""
    server = billing_server(writes=10)
    profile = billed_profile(tmp_path, server)
    image = {"type": "image_url", "image_url": {"url": "https://x.example/cat.png"}}
    jobs = media_jobs(tmp_path, "what is it?", image, 400)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.5", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert 0.4 < server.billed() <= 0.5


def test_files_are_reserved_at_their_most_not_their_id(tmp_path, billing_server):
    """Jobs with a file part named by a short id, billed as a 20-page PDF is (52,000 tokens):
    each call is reserved at a file's most (100 pages), so what was billed stays within the
    limit (reserved at its JSON text, 64 calls in flight would pass it threefold)."""
    server = billing_server(writes=10)
    profile = billed_profile(tmp_path, server)
    document = {"type": "file", "file": {"file_id": "file-abc123"}}
    jobs = media_jobs(tmp_path, "summarise it", document, 60)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "3", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert 1.5 < server.billed() <= 3.0


@pytest.mark.parametrize(
    "job",
    [
        {"prompt": "say it", "params": {"max_tokens": 100, "n": 2.0}},
        {"endpoint": "completions", "prompt": "say", "params": {"max_tokens": 100, "best_of": 3}},
    ],
    ids=["n-as-float", "best_of"],
)
def test_several_answers_are_reserved_for_each(tmp_path, billing_server, job):
    """`n = 2.0` and `best_of = 3` bill that many answers: each call's reservation is
    multiplied, so what was billed stays within the limit."""
    server = billing_server(writes=100)
    profile = billed_profile(tmp_path, server, endpoints=["chat", "completions"])
    jobs = write_lines(tmp_path / "jobs.jsonl", [{"id": f"j{i}", **job} for i in range(300)])
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.2", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert 0.15 < server.billed() <= 0.2


def test_a_paused_turn_reserves_again_for_its_grown_input(tmp_path, billing_server):
    """Anthropic answers that pause (pause_turn) before finishing: the continued call's input
    holds the first part's output, and it is reserved again at that grown input, so what was
    billed stays within the limit."""
    server = billing_server(writes=1000, pause=True)
    entry = {"id": "b0", "provider": "anthropic", "base_url": server.url,
             "model": "claude-sonnet-4-5", "price": GPT_4O, "max_concurrency": 64}  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", [entry])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 300, max_tokens=1000)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "1", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    assert 0.8 < server.billed() <= 1.0


@pytest.mark.parametrize("value", [-1.0, "nan", 20_000.0])
def test_a_bad_price_is_refused_before_anything_is_sent(tmp_path, billing_server, value):
    """A negative, NaN or absurd price (more than 10,000 USD a million tokens) is a profile
    error naming the key (exit 2), and no request is sent."""
    server = billing_server()
    price = {"input": 2.5, "output": float(value)}
    profile = billed_profile(tmp_path, server, price=price)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3, max_tokens=10)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "1", cwd=tmp_path)
    assert 2 == done.returncode, done.stderr
    assert 'backends[0] (id "b0"): price.output:' in done.stderr
    assert [] == server.requests


def test_dry_run_takes_output_at_the_cap_rrcli_really_sends(tmp_path, billing_server):
    """--dry-run over an Anthropic backend and jobs without max_tokens: each call's output is
    counted at the 1,024 tokens rrcli sends by default (not 16,384), labelled as the most."""
    server = billing_server()
    entry = {"id": "a", "provider": "anthropic", "base_url": server.url,
             "model": "claude-sonnet-4-5", "price": GPT_4O}  # fmt: skip
    profile = write_profile(tmp_path / "p.toml", [entry])
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    done = rrcli("run", jobs, "-p", profile, "--dry-run", cwd=tmp_path, env={"COLUMNS": "200"})
    assert 0 == done.returncode, done.stderr
    assert "3 from the cap rrcli sends or the model's most output" in done.stdout
    assert "at most:" in done.stdout
    assert "3,072" in done.stdout
    assert [] == server.requests


def test_a_job_whose_worst_case_passes_the_whole_budget_is_refused_and_the_rest_run(
    tmp_path, billing_server
):
    """A prompt whose input alone may cost more than the whole budget, and a job whose cap
    makes its worst case pass it: neither is ever sent; each is an invalid line whose error
    names its line and the fix (shorten the input; the largest max_tokens that fits), and
    the other jobs run, within the limit."""
    server = billing_server(writes=5)
    profile = billed_profile(tmp_path, server)
    lines = [
        {"id": "long", "prompt": "x" * 50_000, "params": {"max_tokens": 10}},
        {"id": "wide", "prompt": "q", "params": {"max_tokens": 20_000}},
        *({"id": f"j{i}", "prompt": "q", "params": {"max_tokens": 10}} for i in range(5)),
    ]
    jobs = write_lines(tmp_path / "jobs.jsonl", lines)
    done = rrcli("run", jobs, "-p", profile, "-q", "--max-cost", "0.1", cwd=tmp_path)
    assert 1 == done.returncode, done.stderr
    results = {r["id"]: r for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert {"invalid"} == {results[i]["status"] for i in ("long", "wide")}
    long, wide = results["long"]["error"]["message"], results["wide"]["error"]["message"]
    assert long.startswith("line 1: its worst case on backend b0 is $0.1251")
    assert long.endswith("more than the whole budget of $0.1000, so it is never sent: shorten "
                         "its input, or raise the budget (--max-cost)")  # fmt: skip
    assert wide.startswith("line 2: ")
    assert wide.endswith("lower its max_tokens to 9,998 or less, or raise the budget (--max-cost)")
    assert 5 == sum(r["status"] == "ok" for r in results.values())
    assert 5 == len(server.requests)
    assert server.billed() <= 0.1


def test_dry_run_says_the_likely_cost_from_earlier_runs_of_the_profile(tmp_path, billing_server):
    """After a run whose calls wrote 40 tokens each, --dry-run of the same jobs and profile
    prints, beside the most (each call at its cap of 1,000), the likely cost with output at
    that mean of 40, both labelled, and says which traces it read; before any run there is no
    likely cost to tell."""
    server = billing_server(writes=40)
    profile = billed_profile(tmp_path, server)
    jobs = write_jobs(tmp_path / "jobs.jsonl", 10, prompt="x" * 36, max_tokens=1000)
    env = {"COLUMNS": "200"}
    before = rrcli("run", jobs, "-p", profile, "--dry-run", cwd=tmp_path, env=env)
    assert "likely" not in before.stdout
    done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    plan = rrcli("run", jobs, "-p", profile, "--dry-run", cwd=tmp_path, env=env)
    assert 0 == plan.returncode, plan.stderr
    assert 10 == len(server.requests)  # the dry runs sent nothing
    table = [line.replace("│", " ").split() for line in plan.stdout.splitlines()]
    (head,) = [line.replace("│", " ") for line in plan.stdout.splitlines() if "likely USD" in line]
    assert "at most USD" in head
    (total,) = [row for row in table if row and row[0] == "total"]
    given = sum(len(f"{'x' * 36}{i}") // 4 + 4 for i in range(10))  # the estimate of each input
    most, likely = (given * 2.5 + 10 * 1000 * 10.0) / 1e6, (given * 2.5 + 10 * 40 * 10.0) / 1e6
    assert [f"{most:.4f}", f"{likely:.4f}"] == total[-2:]
    note = "likely: output at the mean of the 10 earlier ok calls of this profile in "
    assert note + "jobs.traces.jsonl (tokens a call: b0 40), never past a call's cap" in plan.stdout
