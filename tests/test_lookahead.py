"""The lookahead window of cache_aware batches: a backend with a free slot takes the job its
last prompts continue, every job is handed out once, named sessions and non-chat jobs keep
their order, and the window never holds more than its size. Then through the CLI against
``rrcli sim`` replicas with a prefix cache."""

from __future__ import annotations

import collections

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from runkit import read_jsonl, rrcli, write_profile

from rrcli.records.jobs import job_from_dict
from rrcli.routing.prompts import Prepared, Prompt, rendered
from rrcli.running.lookahead import COLD, Lookahead, _Index
from rrcli.tokens import prefix_blocks, rendered_prompt

SYSTEMS = [
    f"System text {k}, long enough to fill several blocks of the cache. " * 12 for k in range(3)
]


class Warm:
    """A pool whose backend 0 always has room and was last sent system prompt ``held``;
    ``cold`` decisions in a row found nothing warm."""

    threshold = 0.3

    def __init__(self, held: int | None, cold: int = 0) -> None:
        self.held = held
        self.cold = cold
        self.prompts = Prepared()

    @property
    def pictured(self) -> Warm:
        return self

    def free_positions(self) -> list[int]:
        return [0]

    @property
    def recents(self) -> list[list[Prompt]]:
        if self.held is None:
            return [[]]
        return [[rendered(rendered_prompt([{"role": "system", "content": SYSTEMS[self.held]}]))]]

    @property
    def recent_heads(self) -> set[int | None]:
        return {prompt.head for prompts in self.recents for prompt in prompts}


def _jobs(n: int, **extra) -> list:
    return [
        job_from_dict({"id": f"q{i}", "system": SYSTEMS[i % 3], "prompt": f"q {i}", **extra}, i + 1)
        for i in range(n)
    ]


def test_a_free_backend_takes_the_job_it_holds_warm():
    """Jobs interleaved over three system prompts: the backend last sent prompt 2 takes prompt
    2's jobs first, oldest first."""
    taken = [job.id for job in Lookahead(iter(_jobs(9)), Warm(2), 100, False)]
    assert ["q2", "q5", "q8", "q0", "q1", "q3", "q4", "q6", "q7"] == taken


def test_nothing_warm_keeps_the_files_order():
    """With nothing warm the jobs come in the file's order."""
    taken = [job.id for job in Lookahead(iter(_jobs(6)), Warm(None), 100, False)]
    assert ["q0", "q1", "q2", "q3", "q4", "q5"] == taken


def test_no_job_waits_more_than_the_window_past_its_turn():
    """The window of 4: a job that matches nothing is handed out at most 4 hand-outs after its
    turn, however many warm jobs come after it."""
    jobs = [
        job_from_dict({"id": f"q{i}", "system": SYSTEMS[2 if i % 5 else 0], "prompt": "?"}, i + 1)
        for i in range(30)
    ]
    taken = [job.id for job in Lookahead(iter(jobs), Warm(2), 4, False)]
    assert sorted(taken) == sorted(f"q{i}" for i in range(30))
    assert all(taken.index(f"q{i}") <= i + 4 for i in range(30))


def test_after_a_cold_streak_the_window_stands_aside_until_something_is_warm_again():
    """After COLD decisions in a row found nothing warm the jobs come in the file's order, the
    window's prompts not even prepared; the first warm decision ends that: the backend's warm
    jobs come first again."""
    warm = Warm(2, cold=COLD)
    window = Lookahead(iter(_jobs(12)), warm, 100, False)
    assert ["q0", "q1", "q2"] == [next(window).id for _ in range(3)]
    assert 0 == len(warm.prompts)
    warm.cold = 0
    assert ["q5", "q8", "q11", "q3"] == [next(window).id for _ in range(4)]


def test_the_window_hands_out_what_it_held_before_standing_aside():
    """A streak that turns cold while the window holds jobs: they come first, oldest first,
    then the file's next jobs; every job once."""
    warm = Warm(2)
    window = Lookahead(iter(_jobs(9)), warm, 4, False)
    first = next(window).id
    warm.cold = COLD
    rest = [job.id for job in window]
    assert ["q2", "q0", "q1", "q3", "q4", "q5", "q6", "q7", "q8"] == [first, *rest]


def test_a_handed_out_jobs_call_takes_the_prompt_the_window_rendered():
    """The window leaves each job's rendered prompt for its first call: that call (the job's
    params, its messages or an equal copy) takes it once; a later call of the job (a longer
    history), a call of another job with the same messages, or the same call again, renders its
    own."""
    warm = Warm(None)
    jobs = list(Lookahead(iter(_jobs(2)), warm, 100, False))
    prepared = [len(warm.prompts)]
    taken = warm.prompts.of(list(jobs[0].messages), jobs[0].params)
    prepared.append(len(warm.prompts))
    again = warm.prompts.of(list(jobs[0].messages), jobs[0].params)
    other = warm.prompts.of(list(jobs[1].messages), {**jobs[1].params})
    assert [2, 1, 1] == [*prepared, len(warm.prompts)]
    longer = [*jobs[1].messages, {"role": "user", "content": "more"}]
    assert rendered_prompt(longer) == warm.prompts.of(longer, jobs[1].params).text
    assert taken is not again and taken.text == again.text
    assert taken.chain == prefix_blocks(rendered_prompt(list(jobs[0].messages)))
    assert other.text == rendered_prompt(list(jobs[1].messages))


def test_named_sessions_keep_their_order_under_session_binding():
    """With binding = "session", jobs of a named session are handed out in the file's order,
    never reordered towards a warm backend."""
    jobs = _jobs(9, session="s")
    taken = [job.id for job in Lookahead(iter(jobs), Warm(2), 100, True)]
    assert [f"q{i}" for i in range(9)] == taken


def _run(tmp_path, servers, name: str, **top) -> tuple[float, list[dict]]:
    backends = [
        {"id": f"r{i}", "base_url": s.openai_url, "max_concurrency": 2}
        for i, s in enumerate(servers)
    ]
    profile = write_profile(tmp_path / f"{name}.toml", backends, strategy="cache_aware", **top)
    jobs = tmp_path / "jobs.jsonl"
    lines = [
        {"id": f"q{i}", "system": SYSTEMS[i % 3] * 3, "prompt": f"question {i}"} for i in range(60)
    ]
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    out = tmp_path / f"{name}.results.jsonl"
    done = rrcli("run", jobs, "-p", profile, "-q", "--out", out, cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    results = read_jsonl(out)
    cached = sum(r["usage"]["cached_input_tokens"] for r in results)
    return cached / sum(r["usage"]["input_tokens"] for r in results), results


def test_the_window_raises_the_hit_rate_of_a_saturated_pool(sim_server, tmp_path):
    """Through the CLI, every slot busy (concurrency the sum of the caps, each replica at its
    cap), three replicas each caching about one system prompt: with the window each job finds
    its prompt warm far more often than in the file's order, and every job has exactly one
    result line. Calls of 20 ms keep the pool saturated on a loaded machine too: with shorter
    ones a slowed client finds several slots free at once, where the file's order can choose a
    warm one and its hit rate climbs towards the window's."""

    def replicas():
        return [sim_server(prefix_cache_tokens=900, latency_ms=20, jitter_ms=8) for _ in range(3)]

    windowed, results = _run(tmp_path, replicas(), "window")
    in_order = replicas()
    ordered, _ = _run(tmp_path, in_order, "ordered", lookahead=0)
    assert {f"q{i}": 1 for i in range(60)} == dict(collections.Counter(r["id"] for r in results))
    assert [2, 2, 2] == [server.stats()["peak_concurrency"] for server in in_order]
    assert windowed > 0.7
    assert windowed > ordered + 0.2


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=200, deadline=None)
@given(
    prompts=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6)), min_size=1, max_size=30),
    gone=st.sets(st.integers(0, 29)),
    probe=st.tuples(st.integers(0, 2), st.integers(1, 6)),
)
def test_the_index_finds_the_deepest_shared_prefix_and_its_oldest_job(prompts, gone, probe):
    """Jobs whose prompts share prefixes (three roots, each prompt a root's first blocks and its
    own tail), some taken out again: the window's index answers, for any chain, the most
    leading blocks a job still in it shares with the chain, and the oldest such job."""

    def chain(root: int, depth: int, own: int) -> list[int]:
        return [hash((root, k)) for k in range(depth)] + [hash((root, depth, own))]

    index, held = _Index(), {}
    for slot, (root, depth) in enumerate(prompts):
        held[slot] = Prompt.of_blocks(chain(root, depth, slot), 16 * (depth + 1))
        index.add(slot, held[slot])
    for slot in sorted(gone & set(held)):
        index.remove(slot, held.pop(slot))
    wanted = [hash((probe[0], k)) for k in range(probe[1])]
    depths = {slot: _common(wanted, list(prompt.chain)) for slot, prompt in held.items()}
    deepest = max(depths.values(), default=0)
    oldest = min((s for s, d in depths.items() if d == deepest), default=-1) if deepest else -1
    assert (deepest, oldest) == index.deepest(wanted)
    assert (not held) == (not index.heads)


def test_the_index_is_empty_again_once_its_jobs_are_taken():
    """Jobs sharing a first block, one whose blocks repeat a hash, added and taken out in any
    order: nothing of them stays in the window's index."""
    chains = {0: [1, 2, 3], 1: [1, 2, 2], 2: [1, 2, 3, 4], 3: [1]}
    prompts = {slot: Prompt.of_blocks(chain, 16 * len(chain)) for slot, chain in chains.items()}
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]):
        index = _Index()
        for slot, prompt in prompts.items():
            index.add(slot, prompt)
        for slot in order:
            index.remove(slot, prompts[slot])
        assert {} == index.heads
