"""strategy = "cache_aware": each call goes where its prompt's prefix is warm, unless that would
unbalance the pool; pure properties of the choice, then runs through the CLI against
``rrcli sim`` servers that keep a prefix cache."""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import socket
import subprocess
import time

import httpx2
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from runkit import read_jsonl, rrcli, run_on_replicas, write_profile

from rrcli.routing.picture import Picture, whole
from rrcli.routing.prompts import Prompt
from rrcli.routing.strategies import CacheAware, Candidate
from rrcli.tokens import PrefixBlocks

loads = st.lists(
    st.tuples(st.integers(0, 8), st.integers(0, 3), st.integers(1, 8)), min_size=1, max_size=6
)


def _prompt(chain: list[int]) -> Prompt:
    """A prompt of exactly the blocks ``chain``."""
    return Prompt.of_blocks(chain, 16 * len(chain))


def _candidates(shape: list[tuple[int, int, int]]) -> list[Candidate]:
    return [Candidate(i, in_flight=f, waiting=w, cap=c) for i, (f, w, c) in enumerate(shape)]


@given(loads, st.lists(st.tuples(st.integers(0, 5), st.integers(1, 20)), max_size=20), st.data())
def test_never_routes_to_a_backend_at_its_cap(shape, sent, data):
    """Whatever each backend holds and whatever the prompt, a backend at its cap is chosen only
    when every backend is."""
    candidates = _candidates(shape)
    guard = data.draw(st.sampled_from([None, 1000]))  # the default guard, and none at all
    strategy = CacheAware([1000] * len(shape), balance_abs=guard)
    for position, depth in sent:
        strategy.sent(position % len(shape), _prompt(list(range(depth))))
    chain = list(range(data.draw(st.integers(0, 20))))
    chosen = candidates[
        strategy.choose_for(candidates, Prompt.of_blocks(chain, 16 * len(chain) + 5))
    ]
    room = [c for c in candidates if c.in_flight + c.waiting < c.cap]
    assert (not room) or chosen.in_flight + chosen.waiting < chosen.cap


def test_a_backend_at_its_cap_yields_its_longer_match_to_one_with_room():
    """The backend holding the longer prefix is at its cap and another with room holds a
    shorter one that still covers the threshold: the call goes to the one with room."""
    candidates = _candidates([(8, 0, 8), (0, 0, 8)])
    strategy = CacheAware([1000, 1000], balance_abs=1000)  # no load guard in the way
    strategy.sent(0, _prompt(list(range(10))))
    strategy.sent(1, _prompt(list(range(7))))
    chain = list(range(12))
    assert 1 == strategy.choose_for(candidates, Prompt.of_blocks(chain, 16 * len(chain) + 5))


@given(loads, st.lists(st.integers(0, 5), max_size=30))
def test_with_no_shared_prefix_it_is_least_loaded(shape, history):
    """Prompts that share no prefix go where least_loaded would send them: the lowest
    occupancy, whatever the backends hold."""
    candidates = _candidates(shape)
    strategy = CacheAware([1000] * len(shape))
    for n, position in enumerate(history):
        strategy.sent(position % len(shape), _prompt([n * 100 + k for k in range(5)]))
    chosen = candidates[strategy.choose_for(candidates, Prompt.of_blocks([-1, -2, -3], 60))]
    assert min(c.load for c in candidates) == chosen.load


def test_the_backend_holding_the_prefix_takes_the_call():
    """In a balanced pool the backend holding the longest match covering the threshold is
    chosen, even when it is not the least loaded."""
    candidates = _candidates([(0, 0, 8), (2, 0, 8), (0, 0, 8)])
    strategy = CacheAware([1000] * 3)
    strategy.sent(1, _prompt([1, 2, 3, 4]))
    assert 1 == strategy.choose_for(candidates, Prompt.of_blocks([1, 2, 3, 4, 5], 80))


def test_a_short_match_under_the_threshold_does_not_count():
    """A match covering less than cache_threshold of the prompt is no match: least loaded."""
    candidates = _candidates([(0, 0, 8), (2, 0, 8)])
    strategy = CacheAware([1000] * 2, threshold=0.5)
    strategy.sent(1, _prompt([1]))
    assert 0 == strategy.choose_for(candidates, Prompt.of_blocks([1, 2, 3, 4], 64))


def test_an_unbalanced_pool_goes_to_the_least_loaded():
    """When the busiest backend's calls exceed the idlest's by more than balance_abs and by a
    factor over balance_rel, the least loaded is chosen, warm or not."""
    candidates = _candidates([(1, 0, 32), (12, 0, 32)])
    strategy = CacheAware([1000] * 2, balance_abs=4, balance_rel=1.5)
    strategy.sent(1, _prompt([1, 2, 3]))
    assert 0 == strategy.choose_for(candidates, Prompt.of_blocks([1, 2, 3], 48))
    calm = CacheAware([1000] * 2, balance_abs=16, balance_rel=1.5)
    calm.sent(1, _prompt([1, 2, 3]))
    assert 1 == calm.choose_for(candidates, Prompt.of_blocks([1, 2, 3], 48))


def test_the_cold_streak_counts_decisions_that_found_nothing_warm():
    """Each decision whose prompt's first block no backend holds adds one to the cold streak; the
    first that finds it on a backend ends the streak."""
    candidates = _candidates([(0, 0, 8), (0, 0, 8)])
    strategy = CacheAware([1000] * 2)
    for n in range(3):
        strategy.sent(strategy.choose_for(candidates, _prompt([n, 100 + n])), _prompt([n, 100 + n]))
    cold = strategy.cold
    strategy.choose_for(candidates, _prompt([1, 7]))
    assert [3, 0] == [cold, strategy.cold]


def test_after_a_long_cold_streak_one_prompt_in_sample_is_read_until_one_is_warm():
    """Once IDLE decisions in a row found nothing warm, one call in SAMPLE has its prompt read
    (the others are chosen as with no match); a prompt read that finds its first block warm
    ends it, and every prompt is read again."""
    candidates = _candidates([(0, 0, 8), (0, 0, 8)])
    strategy = CacheAware([1_000_000] * 2)
    for n in range(CacheAware.IDLE):
        assert strategy.reads()
        prompt = _prompt([n, -1 - n])
        strategy.sent(strategy.choose_for(candidates, prompt), prompt)
    idle = [strategy.reads() for _ in range(3 * CacheAware.SAMPLE)]
    assert 3 == idle.count(True) == idle[CacheAware.SAMPLE - 1 :: CacheAware.SAMPLE].count(True)
    warm = _prompt([7, 8])  # its first block was sent before
    strategy.choose_for(candidates, warm)
    assert all(strategy.reads() for _ in range(3 * CacheAware.SAMPLE))


def test_a_pool_that_sets_prompt_cache_keys_reads_every_prompt():
    """However long the cold streak, a pool with a backend that sets prompt_cache_key reads
    every call's prompt (its key comes from the prompt)."""
    strategy = CacheAware([1000] * 2, keyed=[False, True])
    strategy.cold = 10 * CacheAware.IDLE
    assert all(strategy.reads() for _ in range(3 * CacheAware.SAMPLE))


@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5)), max_size=40), st.integers(0, 2))
def test_the_recent_heads_count_the_recent_prompts_through_a_cold_streak(sent, cold_every):
    """However long the cold streaks between reads, ``recent_heads`` counts the first blocks of
    the prompts in ``recents``."""
    strategy = CacheAware([1000] * 2)
    for k, (position, head) in enumerate(sent):
        strategy.cold = CacheAware.COLD if cold_every and k % (cold_every + 1) else 0
        strategy.sent(position, _prompt([head, 100 + k]))
        if k % 3 == 0:
            expected = collections.Counter(p.head for r in strategy.recents for p in r)
            assert dict(expected) == strategy.recent_heads


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(0, 3)), max_size=40),
    st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(0, 3)),
    st.integers(1, 400),
)
def test_the_picture_matches_as_a_cache_of_every_block_would(sent, probe, capacity):
    """Prompts from four roots, sent in any order: the picture (a prompt sharing nothing held by
    its first block alone) matches any prompt as a cache holding every block of what was sent
    does, when all of it fits; and it counts what it holds, never more than its capacity."""

    def prompt(root: int, depth: int, own: int) -> Prompt:
        return _prompt([hash((root, k)) for k in range(depth)] + [hash((root, depth, own))])

    picture, every = Picture(16 * capacity), PrefixBlocks(16 * 10_000)
    for shape in sent:
        picture.add(prompt(*shape))
        every.add(prompt(*shape).chain)
        held = sum(1 if lone is None else whole(lone) for lone in picture.blocks.values())
        assert held == len(picture) <= capacity
    if sum(depth + 1 for _, depth, _ in sent) <= capacity:
        assert every.match(prompt(*probe).chain) == picture.match(prompt(*probe))


SYSTEMS = [
    f"You are assistant number {k}; follow house style {k} in every answer. " * 30 for k in range(4)
]


def _grouped_run(tmp_path, servers, strategy: str) -> tuple[dict[int, set[str]], float]:
    """Run 4 system prompts × 8 questions, interleaved; (deployments serving each system
    prompt, cached ÷ input tokens)."""
    lines = [
        {"id": f"q{i}", "system": SYSTEMS[i % 4], "prompt": f"question {i}"} for i in range(32)
    ]
    served: dict[int, set[str]] = collections.defaultdict(set)
    cached = total = 0
    for result in run_on_replicas(tmp_path, servers, strategy, lines):
        served[int(result["id"][1:]) % 4].add(result["deployment"])
        cached += result["usage"]["cached_input_tokens"]
        total += result["usage"]["input_tokens"]
    return dict(served), cached / total


def test_jobs_sharing_a_system_prompt_stay_where_it_is_warm(sim_server, tmp_path):
    """Through the CLI, three sim replicas each caching about one system prompt: cache_aware
    sends each system prompt's jobs to one replica and most input is cached; least_loaded
    scatters them and caches far less."""
    servers = [sim_server(prefix_cache_tokens=1200) for _ in range(3)]
    served, warm = _grouped_run(tmp_path, servers, "cache_aware")
    for s in servers:
        s.reset()
    _, cold = _grouped_run(
        tmp_path, [sim_server(prefix_cache_tokens=1200) for _ in range(3)], "least_loaded"
    )
    assert [1, 1, 1, 1] == [len(served[k]) for k in range(4)]
    assert warm > 0.7
    assert warm > 2 * cold


def test_a_system_given_as_a_param_is_read_as_the_prompt_s_head(sim_server, tmp_path):
    """The system text in the call's params (Anthropic's ``system``) heads the prompt
    cache_aware reads: jobs whose prompts differ only by it stay each on one replica."""
    servers = [sim_server(prefix_cache_tokens=1200) for _ in range(3)]
    lines = [
        {"id": f"q{i}", "prompt": f"question {i}", "params": {"system": SYSTEMS[i % 4]}}
        for i in range(32)
    ]
    served: dict[int, set[str]] = collections.defaultdict(set)
    cached = total = 0
    for result in run_on_replicas(tmp_path, servers, "cache_aware", lines):
        served[int(result["id"][1:]) % 4].add(result["deployment"])
        cached += result["usage"]["cached_input_tokens"]
        total += result["usage"]["input_tokens"]
    assert [1, 1, 1, 1] == [len(served[k]) for k in range(4)]
    assert cached / total > 0.7


def test_validate_names_a_bad_cache_setting(tmp_path):
    """A cache_threshold outside 0..1 is an error naming the key; cache_aware itself is a
    valid strategy."""
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "s", "provider": "sim"}], strategy="cache_aware",
        cache_threshold=1.5,
    )  # fmt: skip
    done = rrcli("validate", profile, cwd=tmp_path)
    assert 1 == done.returncode
    assert "cache_threshold" in done.stdout + done.stderr
    assert "strategy" not in done.stdout + done.stderr


def _keys_sent(sim_server, tmp_path, lines: list[dict], **backend) -> dict:
    """{a job's prompt: the prompt_cache_key its call was sent with}."""
    server = sim_server()
    profile = write_profile(
        tmp_path / "k.toml",
        [{"id": "h", "base_url": server.openai_url, **backend}],
        strategy="cache_aware",
        concurrency=1,
    )
    jobs = tmp_path / "k.jsonl"
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    bodies = [r["body"] for r in server.received("/v1/chat/completions")]
    return {b["messages"][-1]["content"]: b.get("prompt_cache_key") for b in bodies}


def test_a_hosted_backend_gets_one_prompt_cache_key_per_prefix(sim_server, tmp_path):
    """A backend that takes prompt_cache_key: jobs sharing a system prompt are sent one key,
    another system prompt another; a job's own key is kept."""
    lines = [
        {"id": "a1", "system": SYSTEMS[0], "prompt": "one"},
        {"id": "a2", "system": SYSTEMS[0], "prompt": "two"},
        {"id": "b1", "system": SYSTEMS[1], "prompt": "three"},
        {
            "id": "own",
            "system": SYSTEMS[0],
            "prompt": "four",
            "params": {"prompt_cache_key": "mine"},
        },
    ]
    keys = _keys_sent(sim_server, tmp_path, lines, prompt_cache_key=True)
    assert keys["one"] == keys["two"] != keys["three"]
    assert [True, "mine"] == [keys["one"].startswith("rrcli-"), keys["four"]]


def test_one_prefix_spreads_over_more_keys_only_past_fifteen_a_minute(sim_server, tmp_path):
    """40 calls of one prefix within a minute: the first 15 take one key, the next 15 a
    second, the last 10 a third."""
    lines = [{"id": f"q{i}", "system": SYSTEMS[0], "prompt": f"q{i}"} for i in range(40)]
    keys = _keys_sent(sim_server, tmp_path, lines, prompt_cache_key=True)
    assert [15, 15, 10] == sorted(collections.Counter(keys.values()).values(), reverse=True)


def test_a_local_server_gets_no_prompt_cache_key(sim_server, tmp_path):
    """An OpenAI-compatible server on a private address (a local replica) is sent no key."""
    lines = [{"id": "a1", "system": SYSTEMS[0], "prompt": "one"}]
    assert {"one": None} == _keys_sent(sim_server, tmp_path, lines)


LLAMA_SERVER = shutil.which("llama-server")
LLAMA_MODEL = os.environ.get("RRCLI_LLAMA_MODEL", "")


@pytest.mark.skipif(
    not (LLAMA_SERVER and os.path.isfile(LLAMA_MODEL)),
    reason="needs llama.cpp's llama-server on PATH and a GGUF model at $RRCLI_LLAMA_MODEL: "
    "neither is on this machine, and building llama.cpp and fetching a model is no quick install",
)
def test_real_replicas_keep_each_system_prompt_on_one(tmp_path):
    """Two llama.cpp replicas: cache_aware sends each system prompt's jobs to one replica."""
    ports = [_free_port(), _free_port()]
    procs = [
        subprocess.Popen(
            [LLAMA_SERVER, "-m", LLAMA_MODEL, "--port", str(p), "-c", "4096", "-np", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in ports
    ]
    try:
        for port in ports:
            _wait_ready(f"http://127.0.0.1:{port}/health")
        backends = [
            {"id": f"l{i}", "base_url": f"http://127.0.0.1:{p}/v1", "max_concurrency": 1,
             "prefix_cache_tokens": 4096, "params": {"max_tokens": 4}}
            for i, p in enumerate(ports)
        ]  # fmt: skip
        profile = write_profile(tmp_path / "l.toml", backends, strategy="cache_aware")
        jobs = tmp_path / "l.jsonl"
        lines = [{"id": f"q{i}", "system": SYSTEMS[i % 2], "prompt": f"q {i}"} for i in range(8)]
        jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        done = rrcli("run", jobs, "-p", profile, "-q", cwd=tmp_path, timeout=600)
        assert 0 == done.returncode, done.stderr
        served = collections.defaultdict(set)
        for result in read_jsonl(tmp_path / "l.results.jsonl"):
            served[int(result["id"][1:]) % 2].add(result["deployment"])
        assert [1, 1] == [len(served[0]), len(served[1])]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx2.HTTPError):
            if httpx2.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise AssertionError(f"{url} never became ready")
