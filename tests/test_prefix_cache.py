"""The simulated prefix cache: ``rrcli sim --prefix-cache-tokens`` and the sim provider hold the
16-token blocks of recent prompts (LRU), report the held start of a prompt as cached input as
vLLM and OpenAI do, and read only the rest at the prefill rate."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st
from runkit import read_jsonl, rrcli, write_profile
from simkit import post

from rrcli.tokens import (
    BLOCK_TOKENS,
    PrefixBlocks,
    prefix_blocks,
    rendered_prompt,
    rendered_with_reply,
)

SYSTEM = "You are a careful assistant who answers in one word. " * 40  # ~2,100 characters


def chat(url: str, question: str, system: str = SYSTEM) -> dict:
    body = {
        "model": "sim",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }
    return post(f"{url}/chat/completions", body).json()["usage"]


def test_a_repeated_system_prompt_is_reported_cached(sim_server):
    """The second prompt with the same long system text has that text's whole blocks cached;
    the first has none."""
    server = sim_server(prefix_cache_tokens=100_000)
    first = chat(server.openai_url, "What is 2+2?")
    second = chat(server.openai_url, "What is the capital of France?")
    blocks = len(prefix_blocks(rendered_prompt([{"role": "system", "content": SYSTEM}])))
    assert 0 == first["prompt_tokens_details"]["cached_tokens"]
    assert blocks * BLOCK_TOKENS == second["prompt_tokens_details"]["cached_tokens"]


def test_anthropic_reports_cache_reads(sim_server):
    """Anthropic's wire reports the held tokens as cache_read_input_tokens, the rest as
    input_tokens."""
    server = sim_server(prefix_cache_tokens=100_000)
    body = {
        "model": "sim",
        "max_tokens": 10,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": "hello"}],
    }
    headers = {"anthropic-version": "2023-06-01"}
    post(f"{server.url}/v1/messages", body, headers)
    usage = post(f"{server.url}/v1/messages", body, headers).json()["usage"]
    assert usage["cache_read_input_tokens"] > 0
    assert usage["input_tokens"] < usage["cache_read_input_tokens"]


def test_without_a_cache_nothing_is_cached(sim_server):
    """A sim with no prefix cache (the default) reports no cached tokens however often a prompt
    repeats."""
    server = sim_server()
    chat(server.openai_url, "q")
    assert 0 == chat(server.openai_url, "q")["prompt_tokens_details"]["cached_tokens"]


def test_the_least_recently_used_blocks_are_given_up(sim_server):
    """Past its capacity the cache gives up the blocks used longest ago, a prompt's tail before
    its head: a second prompt that overflows the cache leaves the first one's start, a larger
    one leaves nothing of it."""
    server = sim_server(prefix_cache_tokens=700)  # 43 blocks; SYSTEM fills 33
    full = chat(server.openai_url, "q0") and chat(server.openai_url, "q1")
    full = full["prompt_tokens_details"]["cached_tokens"]
    chat(server.openai_url, "q2", system="Another long system text. " * 90)  # 36 blocks
    head = chat(server.openai_url, "q3")["prompt_tokens_details"]["cached_tokens"]
    chat(server.openai_url, "q4", system="Another long system text. " * 120)  # 48 blocks
    none = chat(server.openai_url, "q5")["prompt_tokens_details"]["cached_tokens"]
    assert [True, 0] == [0 < head < full, none]


def test_run_reports_cached_input_on_results(sim_server, tmp_path):
    """Through the CLI: jobs sharing a system prompt against a sim with a prefix cache have the
    shared blocks as usage.cached_input_tokens on their result lines (the first has none)."""
    server = sim_server(prefix_cache_tokens=100_000)
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}], concurrency=1
    )
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"id": f"q{i}", "system": SYSTEM, "prompt": f"question {i}"} for i in range(3)]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    cached = [
        r["usage"].get("cached_input_tokens") for r in read_jsonl(tmp_path / "jobs.results.jsonl")
    ]
    assert 0 == cached[0]
    assert cached[1] == cached[2] > 0


def test_the_sim_provider_keeps_a_prefix_cache(tmp_path):
    """The in-process sim provider models the same cache: a repeated system prompt is cached
    on the second job."""
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "s", "provider": "sim", "sim": {"prefix_cache_tokens": 100_000}}],
        concurrency=1,
    )
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"id": f"q{i}", "system": SYSTEM, "prompt": f"question {i}"} for i in range(2)]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    cached = [
        r["usage"].get("cached_input_tokens") for r in read_jsonl(tmp_path / "jobs.results.jsonl")
    ]
    assert [0, True] == [cached[0], cached[1] > 0]


texts = st.text(alphabet="abcdef ", max_size=600)


@given(texts, texts)
def test_the_blocks_of_a_prefix_start_the_blocks_of_the_whole(head, tail):
    """A prompt's blocks begin with the blocks of any prefix of it: block k names the first
    k + 1 blocks, so a shared start gives shared blocks."""
    whole, part = prefix_blocks(head + tail), prefix_blocks(head)
    assert part == whole[: len(part)]


@given(st.lists(st.lists(st.integers(0, 50), max_size=40), max_size=30), st.integers(0, 400))
def test_the_cache_never_holds_more_than_its_capacity(prompts, capacity):
    """However prompts come, the cache holds at most capacity // 16 blocks, and a prompt just
    added matches as far as the capacity allows."""
    cache = PrefixBlocks(capacity)
    for chain in prompts:
        chain = list(dict.fromkeys(chain))  # a chain names distinct prefixes
        cache.add(chain)
        assert len(cache) <= capacity // BLOCK_TOKENS
        assert min(len(chain), capacity // BLOCK_TOKENS) == cache.match(chain)


def test_stats_shows_the_hit_rate_and_the_money_the_cache_saved(sim_server, tmp_path):
    """Call records carry cached_input_tokens; stats shows per deployment the cached share of
    the input and what the cached tokens saved at the cached-input price, and a cost that is
    what the calls were charged: the cached input at the cached-input price."""
    server = sim_server(prefix_cache_tokens=100_000)
    price = {"input": 2.0, "output": 8.0, "cached_input": 0.5}
    profile = write_profile(
        tmp_path / "p.toml",
        [{"id": "a", "base_url": server.openai_url, "price": price}],
        concurrency=1,
    )
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"id": f"q{i}", "system": SYSTEM, "prompt": f"question {i}"} for i in range(4)]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    assert 0 == rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path).returncode
    records = [r for r in read_jsonl(tmp_path / "jobs.traces.jsonl") if r["event"] == "call"]
    cached = sum(r["cached_input_tokens"] for r in records)
    given = sum(r["input_tokens"] for r in records)
    done = rrcli("stats", tmp_path / "jobs.traces.jsonl", "--json", cwd=tmp_path)
    (group,) = orjson.loads(done.stdout)["groups"]
    assert (cached, round(cached / given, 4), round(cached * 1.5 / 1e6, 6)) == (
        group["cached_input_tokens"],
        group["cache_hit_rate"],
        group["cache_saved_usd"],
    )
    assert cached > 0
    output = sum(r["output_tokens"] for r in records)
    billed = round(((given - cached) * 2.0 + cached * 0.5 + output * 8.0) / 1e6, 6)
    charged = round(sum(r["cost_usd"] for r in records), 6)
    assert (billed, billed) == (charged, group["cost_usd"])


def session_turns(tmp_path, backend: dict) -> tuple[list[str], list[int]]:
    """One two-turn session run through the CLI on ``backend``: (outputs, cached input tokens)
    of its turns."""
    profile = write_profile(tmp_path / "p.toml", [backend], concurrency=1)
    jobs = tmp_path / "jobs.jsonl"
    job = {"id": "s", "system": SYSTEM, "turns": ["Tell me a story.", "And then?"]}
    jobs.write_bytes(orjson.dumps(job) + b"\n")
    done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    (result,) = read_jsonl(tmp_path / "jobs.results.jsonl")
    turns = result["turns"]
    return [t["output"] for t in turns], [t["usage"]["cached_input_tokens"] for t in turns]


def reply_blocks(outputs: list[str]) -> tuple[int, int]:
    """(tokens of the first turn's prompt in whole blocks, the same of that prompt followed by
    its reply): what a cache holding only prompts, or prompts and replies, gives turn two."""
    first = rendered_prompt(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me a story."}]
    )
    with_reply = rendered_with_reply(first, outputs[0])
    return (
        len(prefix_blocks(first)) * BLOCK_TOKENS,
        len(prefix_blocks(with_reply)) * BLOCK_TOKENS,
    )


def test_a_second_turn_finds_the_first_turns_reply_cached(sim_server, tmp_path):
    """Through the CLI against `rrcli sim`: the server holds the blocks of the reply it wrote
    after the prompt, as vLLM keeps the KV of generated tokens, so a session's second turn (its
    history repeats the first reply) is cached through the reply's blocks, not only the first
    prompt's."""
    server = sim_server(prefix_cache_tokens=100_000)
    outputs, cached = session_turns(tmp_path, {"id": "a", "base_url": server.openai_url})
    prompt_only, with_reply = reply_blocks(outputs)
    assert prompt_only < with_reply
    assert [0, with_reply] == cached


def test_the_sim_provider_holds_the_reply_too(tmp_path):
    """The in-process sim provider's cache holds a reply after its prompt as the server's does:
    the second turn is cached through the first reply's blocks."""
    backend = {"id": "s", "provider": "sim", "sim": {"prefix_cache_tokens": 100_000}}
    outputs, cached = session_turns(tmp_path, backend)
    assert [0, reply_blocks(outputs)[1]] == cached
