"""Cache-aware scheduling against least_loaded and an oracle, on replicas with a prefix cache.

    python benchmarks/bench_cache_aware.py [--scale F] [--only a,b,c,t] [--inproc] [--engine N,N]
        [--engine-ab N,R]

Four `rrcli sim` servers in their own processes stand for four vLLM replicas: each keeps a
prefix cache of PREFIX_TOKENS tokens (16-token blocks, LRU), answers after LATENCY_MS ± JITTER_MS
plus PREFILL_MS per input token its cache does not hold; the profile gives each backend
max_concurrency 8 (the run's concurrency is the sum, 32: every slot busy). Each scenario runs
`rrcli run` end to end in a fresh process, once per contender, the servers' caches emptied
between runs (``/stats/reset``):
  (a) 32 long system prompts (~1,000 tokens) × 100 short questions, interleaved in the file
      (shuffled with a fixed seed);
  (b) 200 multi-turn sessions of 8 turns (each session's system text ~500 tokens of its own,
      each turn sent with the whole history, the replies the sim writes included), LIVE of them
      open at once and their turns interleaved: each turn a job of its own, a session's next
      turn coming after other sessions' turns, as agents' and users' turns do (tool calls and
      typing between them);
  (t) (b) as one `turns` job a session, each next turn sent the moment the last is answered
      (not in the default set: the slot that answer freed is the least loaded when the next
      turn asks, so least_loaded keeps every session where it is warm by accident);
  (c) no shared prefixes: 3,200 prompts of ~100 tokens, each its own.
Contenders: ``least_loaded``; ``cache_aware``; and an oracle that knows where every prefix is
warm because it put it there: each prefix group (a system prompt; a session) is bound to one
replica for the run (``binding = "session"``, the group as the session), so every call after a
group's first lands where its prefix is cached (until the replica's LRU gives it up).
Figures from the traces: the hit rate (cached ÷ input tokens over the calls), the makespan
(first call's start to the last call's end) and the work-bound makespan (the replicas' modelled
time for what each call made them read, over all slots: the makespan on an idle machine, apart
from CPU; on a shared 2-core machine the measured one is CPU-bound for cheap calls). Goals:
(a) and (b) hit rate ≥ 0.9 × the oracle's and makespan ≤ 0.5 × least_loaded's; (c) makespan
within 3 % of least_loaded's.

``--inproc``: the same replicas as in-process sim backends (the same cache and timing model, no
HTTP): the makespans measure the scheduling, not the CPU of five processes on a loaded machine.

``--engine N,N``: the engine alone, in-process on the zero-latency sim provider (no cache): jobs
of (c) shape with cache_aware (its lookahead on) and least_loaded, each N in a fresh process;
jobs/s and jobs a CPU second of the run (goal: cache_aware ≥ 0.9 × least_loaded; on a
shared machine the CPU-second figure is the fairer, a process's share of the cores varying) and
peak RSS (goal: flat in N).

``--engine-ab N,R``: the same engine runs in one process, R rounds of N jobs, each round
least_loaded, cache_aware and cache_aware with no window in alternating order; prints the median
of the rounds' CPU-second ratios (on a loaded machine, steadier than separate processes).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx2
import orjson
import tomli_w
from _common import call_records, peak_rss_mb, sim_server, start_run

from rrcli.config.profile import SimSettings
from rrcli.sim.behaviour import SimBehaviour

REPLICAS = 4
CAP = 8
PREFIX_TOKENS = 16_000
# a small model on a CPU (llama.cpp): prefill about a millisecond a token
LATENCY_MS, JITTER_MS, PREFILL_MS = 50, 25, 1.0
CONTENDERS = ("least_loaded", "cache_aware", "oracle")
TURNS = 8  # turns a session in (b)
LIVE = 48  # sessions open at once in (b): 1.5 × the slots, their histories within the caches
WORDS = ("amber", "basil", "cedar", "dune", "ember", "fern", "grove", "harbor", "island", "jade")


def _text(seed: int, tokens: int) -> str:
    """A text of about ``tokens`` tokens that starts differently for each seed."""
    words = [f"#{seed}"]
    while len(" ".join(words)) < tokens * 4:
        words.append(WORDS[(seed * 7 + len(words) * 3) % len(WORDS)])
    return " ".join(words)


def jobs_a(scale: float) -> list[dict]:
    systems = [_text(k, 1000) for k in range(32)]
    n = int(100 * scale)
    jobs = [
        {"id": f"a{q}-{k}", "session": f"sys{k}", "system": systems[k], "prompt": f"Q{q}: {k}?"}
        for q in range(n)
        for k in range(32)
    ]
    random.Random(0).shuffle(jobs)  # interleaved as a real file is: no period to alias with
    return jobs


def _turn(s: int, t: int) -> str:
    return f"Turn {t} of session {s}: {_text(5000 + s * TURNS + t, 50)}"


def jobs_b(scale: float) -> list[dict]:
    """Each turn of each session a job of its own with its whole history: the system text, the
    earlier turns and the replies the sim writes to them (as a replica's cache holds them), the
    new turn. The sessions start LIVE // TURNS a round, so LIVE are open at once, and each
    round's turns are shuffled: a session's next turn comes after other sessions' turns."""
    replies = SimBehaviour(SimSettings(), random.Random(0))
    per_round = max(1, LIVE // TURNS)
    rounds: dict[int, list[dict]] = {}
    for s in range(int(200 * scale)):
        messages = [{"role": "system", "content": _text(1000 + s, 500)}]
        for t in range(TURNS):
            messages.append({"role": "user", "content": _turn(s, t)})
            job = {"id": f"s{s}-{t}", "session": f"s{s}", "messages": list(messages)}
            rounds.setdefault(s // per_round + t, []).append(job)
            reply = replies.text(replies.variant(messages))
            messages.append({"role": "assistant", "content": reply})
    rng, jobs = random.Random(0), []
    for r in sorted(rounds):
        rng.shuffle(rounds[r])
        jobs += rounds[r]
    return jobs


def jobs_t(scale: float) -> list[dict]:
    """(b) as one `turns` job a session: each next turn sent the moment the last is answered."""
    return [
        {"id": f"s{s}", "session": f"s{s}", "system": _text(1000 + s, 500),
         "turns": [_turn(s, t) for t in range(TURNS)]}
        for s in range(int(200 * scale))
    ]  # fmt: skip


def jobs_c(scale: float) -> list[dict]:
    return list(_unshared(int(3200 * scale)))


def _unshared(n: int) -> Iterator[dict]:
    """(c)'s ``n`` jobs one at a time: the engine's peak RSS is then its own, not the list's."""
    return ({"id": f"c{i}", "prompt": _text(10_000 + i, 100)} for i in range(n))


SCENARIOS = {"a": jobs_a, "b": jobs_b, "c": jobs_c, "t": jobs_t}


def write_profile(path: Path, urls: list[str] | None, contender: str) -> Path:
    """The pool: the `rrcli sim` servers at ``urls``, or (None) as many in-process sim backends
    with the same behaviour."""
    if urls is None:
        sim = {
            "latency_ms": LATENCY_MS,
            "jitter_ms": JITTER_MS,
            "prefix_cache_tokens": PREFIX_TOKENS,
            "prefill_ms_per_token": PREFILL_MS,
        }
        backends = [
            {"id": f"r{i}", "provider": "sim", "max_concurrency": CAP, "sim": sim}
            for i in range(REPLICAS)
        ]
    else:
        backends = [
            {"id": f"r{i}", "provider": "openai", "model": "sim", "base_url": url, "auth": "none",
             "allow_private": True, "max_concurrency": CAP, "prefix_cache_tokens": PREFIX_TOKENS}
            for i, url in enumerate(urls)
        ]  # fmt: skip
    top = {"strategy": contender, "seed": 1}
    if contender == "oracle":
        top = {"strategy": "least_loaded", "binding": "session", "seed": 1}
    path.write_text(tomli_w.dumps({**top, "backends": backends}))
    return path


def write_jobs(path: Path, jobs: Iterable[dict], contender: str) -> Path:
    """The scenario's jobs; the session names the prefix group for the oracle alone."""
    with open(path, "wb") as f:
        for job in jobs:
            line = (
                job if contender == "oracle" else {k: v for k, v in job.items() if k != "session"}
            )
            f.write(orjson.dumps(line) + b"\n")
    return path


def measure(traces: Path) -> tuple[float, float, int, float]:
    """(makespan in seconds, cached ÷ input tokens, calls, the work-bound makespan) over the
    trace's call records. The work-bound makespan is the replicas' own time for what they were
    sent (LATENCY_MS + PREFILL_MS per uncached input token, a call) spread over every slot: what
    the run would take on an idle machine, apart from the client's and servers' CPU."""
    first, last, cached, given, calls, work = float("inf"), 0.0, 0, 0, 0, 0.0
    for rec in call_records(traces):
        first, last = min(first, rec["start"]), max(last, rec["end"])
        held, read = rec.get("cached_input_tokens") or 0, rec.get("input_tokens") or 0
        cached, given, calls = cached + held, given + read, calls + 1
        work += (LATENCY_MS + PREFILL_MS * (read - held)) / 1000.0
    return last - first, cached / max(1, given), calls, work / (REPLICAS * CAP)


def scenarios(names: str, scale: float, inproc: bool = False) -> None:
    flags = ["--latency-ms", str(LATENCY_MS), "--jitter-ms", str(JITTER_MS),
             "--prefill-ms-per-token", str(PREFILL_MS),
             "--prefix-cache-tokens", str(PREFIX_TOKENS)]  # fmt: skip
    print(
        f"{REPLICAS} replicas: cache {PREFIX_TOKENS:,} tokens, {LATENCY_MS}±{JITTER_MS} ms + "
        f"{PREFILL_MS} ms per uncached input token, cap {CAP}; concurrency {REPLICAS * CAP}"
    )
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        tmp = Path(d)
        urls = (
            None if inproc else [stack.enter_context(sim_server(*flags)) for _ in range(REPLICAS)]
        )
        for name in names.split(","):
            jobs = SCENARIOS[name](scale)
            figures = {}
            for contender in CONTENDERS:
                for url in urls or ():
                    httpx2.post(url.removesuffix("/v1") + "/stats/reset")
                path = write_jobs(tmp / f"{name}-{contender}.jsonl", jobs, contender)
                profile = write_profile(tmp / f"{name}-{contender}.toml", urls, contender)
                traces = tmp / f"{name}-{contender}.traces.jsonl"
                done = start_run(path, profile, tmp / f"{name}-{contender}.out", traces)
                done.wait()
                figures[contender] = span, hit, calls, bound = measure(traces)
                print(
                    f"  ({name}) {contender:>12}: makespan {span:7.2f} s (work-bound "
                    f"{bound:6.2f} s), hit rate {hit:6.1%}, {calls} calls, exit {done.returncode}",
                    flush=True,
                )
            ll_span, ll_hit, _, ll_bound = figures["least_loaded"]
            ca_span, ca_hit, _, ca_bound = figures["cache_aware"]
            oracle_hit = figures["oracle"][1]
            print(
                f"  ({name}) cache_aware: hit rate {ca_hit / max(oracle_hit, 1e-9):.2f} × the "
                f"oracle's (least_loaded {ll_hit / max(oracle_hit, 1e-9):.2f} ×), makespan "
                f"{ca_span / ll_span:.3f} × least_loaded's "
                f"(work-bound {ca_bound / ll_bound:.3f} ×)",
                flush=True,
            )


def _engine_run(tmp: Path, n: int, strategy: str, lookahead: int = 1000) -> tuple[float, float]:
    """One run of the ``n`` jobs in ``tmp`` on the zero-latency sim: (jobs/s, jobs a CPU s)."""
    import asyncio

    from rrcli.config.profile import Backend, Profile, SimSettings
    from rrcli.running.runner import RunOptions, run

    profile = Profile(
        name="engine",
        strategy=strategy,
        lookahead=lookahead,
        backends=tuple(
            Backend(id=f"sim-{i}", provider="sim", base_url="sim://local", sim=SimSettings())
            for i in range(REPLICAS)
        ),
    )
    for name in ("r.jsonl", "t.jsonl"):
        (tmp / name).unlink(missing_ok=True)
    options = RunOptions(jobs=tmp / "jobs.jsonl", out=tmp / "r.jsonl", traces=tmp / "t.jsonl")
    t0, cpu0 = time.perf_counter(), time.process_time()
    summary = asyncio.run(run(profile, options, environ={}))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert summary.ok == n, summary.jobs
    return n / elapsed, n / cpu


def engine_one(n: int, strategy: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        write_jobs(tmp / "jobs.jsonl", _unshared(n), "least_loaded")
        rate, cpu_rate = _engine_run(tmp, n, strategy)
        print(f"{rate:.1f} {cpu_rate:.1f} {peak_rss_mb():.1f}")


def engine_ab(spec: str) -> None:
    """``N,R``: R rounds in one process, each running N jobs least_loaded, cache_aware and
    cache_aware without its window, in alternating order; the median of each round's ratio of
    jobs a CPU second (one process: the machine's swings hit both arms of a round alike)."""
    n, rounds = map(int, spec.split(","))
    arms = [("least_loaded", 1000), ("cache_aware", 1000), ("cache_aware", 0)]
    rates: dict[tuple[str, int], list[float]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        write_jobs(tmp / "jobs.jsonl", _unshared(n), "least_loaded")
        for r in range(rounds):
            for arm in arms if r % 2 == 0 else arms[::-1]:
                rates[arm].append(_engine_run(tmp, n, *arm)[1])
    base = rates[arms[0]]
    for strategy, lookahead in arms[1:]:
        ratios = sorted(x / y for x, y in zip(rates[(strategy, lookahead)], base, strict=True))
        print(
            f"  engine A/B {n:,} jobs × {rounds}: {strategy} (lookahead {lookahead}) "
            f"{ratios[len(ratios) // 2]:.3f} × least_loaded's jobs a CPU second (median of "
            f"the rounds; {ratios[0]:.3f}–{ratios[-1]:.3f})",
            flush=True,
        )


def engine(sizes: str) -> None:
    for n in map(int, sizes.split(",")):
        rates: dict[str, list[float]] = {}
        cpu_rates: dict[str, list[float]] = {}
        for strategy in ("least_loaded", "cache_aware") * 3:
            done = subprocess.run(
                [sys.executable, __file__, "--engine-one", str(n), strategy],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            rate, cpu_rate, rss = map(float, done.stdout.split())
            rates.setdefault(strategy, []).append(rate)
            cpu_rates.setdefault(strategy, []).append(cpu_rate)
            print(
                f"  engine {n:>8,} jobs, {strategy:>12}: {rate:9,.0f} jobs/s "
                f"({cpu_rate:9,.0f} a CPU second), peak RSS {rss:6.1f} MB"
            )
        best = {k: max(v) for k, v in rates.items()}
        cpu = {k: max(v) for k, v in cpu_rates.items()}
        print(
            f"  engine {n:>8,} jobs: cache_aware {best['cache_aware'] / best['least_loaded']:.2f} "
            f"× least_loaded's jobs/s, {cpu['cache_aware'] / cpu['least_loaded']:.2f} × its jobs "
            f"a CPU second (best of three each; on a shared machine the CPU figure is the fairer)",
            flush=True,
        )


def main() -> None:
    if sys.argv[1:2] == ["--engine-one"]:
        engine_one(int(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0, help="jobs per scenario × this")
    parser.add_argument("--only", default="a,b,c")
    parser.add_argument("--engine", default="", help="sizes for the engine part, e.g. 20000,100000")
    parser.add_argument("--inproc", action="store_true", help="in-process sim replicas, no HTTP")
    parser.add_argument("--engine-ab", default="", help="N,R: the engine's A/B in one process")
    args = parser.parse_args()
    if args.only:
        scenarios(args.only, args.scale, args.inproc)
    if args.engine:
        engine(args.engine)
    if args.engine_ab:
        engine_ab(args.engine_ab)


if __name__ == "__main__":
    main()
