"""The simulated backends: the in-process ``sim`` provider and the ``rrcli sim`` command."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from rrcli.cli import main
from rrcli.config.profile import Backend, RetrySettings, SimSettings
from rrcli.errors import StatusError
from rrcli.providers import make_provider
from rrcli.providers.base import Call
from rrcli.sim.behaviour import SimBehaviour, pacing
from rrcli.sim.provider import SimProvider

ROOT = Path(__file__).resolve().parents[1]
RETRY = RetrySettings()


def sim_backend(**settings: object) -> Backend:
    return Backend(id="sim-1", provider="sim", model="sim-model", sim=SimSettings(**settings))


def run_calls(b: Backend, calls: list[Call], *, seed: int | None = 1, on_text=None):
    """Send calls one by one through the sim provider with a recording sleep; returns
    (replies or errors, the sleeps asked for)."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def go():
        provider = SimProvider(b, retry=RETRY, seed=seed, sleep=sleep)
        out = []
        for call in calls:
            try:
                out.append(await provider.send(call, on_text))
            except StatusError as exc:
                out.append(exc)
        return out

    return asyncio.run(go()), sleeps


def ask(text: str, stream: bool = False) -> Call:
    return Call([{"role": "user", "content": text}], stream=stream)


def test_make_provider_builds_the_sim_provider_without_network() -> None:
    """A ``sim`` backend gets the in-process provider: no server address, no key needed."""
    provider = make_provider(sim_backend(), None, retry=RETRY, seed=0)
    assert (SimProvider, None) == (type(provider), provider.server_address)


def test_zero_latency_never_sleeps_and_output_is_deterministic() -> None:
    """At zero latency the sim provider does not sleep at all; the same prompt gives the same
    text (and the configured token count) in every run, a different prompt another text."""
    b = sim_backend(output_tokens=6)
    first, sleeps = run_calls(b, [ask("a"), ask("b"), ask("a")])
    again, _ = run_calls(b, [ask("a")], seed=99)
    assert [] == sleeps
    assert first[0].output == first[2].output == again[0].output
    assert first[0].output != first[1].output
    assert (6, 6, "sim-model") == (
        len(first[0].output.split()),
        first[0].output_tokens,
        first[0].response_model,
    )


def test_errors_follow_the_rates_and_the_seed() -> None:
    """error_rate gives transient 500s, rate_limit_rate transient 429s with retry_after from
    retry_after_ms; the same seed gives the same sequence."""
    b = sim_backend(error_rate=0.3, rate_limit_rate=0.3, retry_after_ms=250)
    calls = [ask(str(i)) for i in range(300)]
    one, _ = run_calls(b, calls, seed=7)
    two, _ = run_calls(b, calls, seed=7)
    kinds = [getattr(r, "type", "ok") for r in one]
    assert kinds == [getattr(r, "type", "ok") for r in two]
    assert 60 < kinds.count("http_500") < 120
    assert 60 < kinds.count("http_429") < 120
    limited = next(r for r in one if getattr(r, "type", "") == "http_429")
    assert (True, True, 0.25) == (limited.transient, limited.rate_limited, limited.retry_after)
    failed = next(r for r in one if getattr(r, "type", "") == "http_500")
    assert (True, False) == (failed.transient, failed.rate_limited)


def test_latency_sleeps_through_the_injected_sleep() -> None:
    """A plain call with latency sleeps once, for the latency (seconds)."""
    _, sleeps = run_calls(sim_backend(latency_ms=80), [ask("x")])
    assert [0.08] == sleeps


def test_streaming_calls_on_text_with_the_pieces_and_times_the_first() -> None:
    """A streamed sim call hands on_text pieces that join to the output; with ttft and a
    token rate, the first sleep is the ttft and the sleeps add up to the whole generation."""
    pieces: list[str] = []
    b = sim_backend(output_tokens=5, ttft_ms=40, tokens_per_s=100)
    replies, sleeps = run_calls(b, [ask("x", stream=True)], on_text=pieces.append)
    assert replies[0].output == "".join(pieces)
    assert 0.04 == sleeps[0]
    assert 0.08 == pytest.approx(sum(sleeps))


def test_pacing_spaces_pieces_evenly_from_ttft_to_total() -> None:
    """Pacing covers every piece once, first at ttft, ending at total."""
    plan = list(pacing(10, 0.1, 1.0))
    assert (0, 10) == (plan[0][1], plan[-1][2])
    assert [p[2] for p in plan[:-1]] == [p[1] for p in plan[1:]]
    assert 1.0 == pytest.approx(sum(p[0] for p in plan))


def test_behaviour_timeline_uses_latency_when_no_ttft_is_set() -> None:
    """Without ttft_ms the first token comes at the latency; the reply ends there too."""
    import random

    behaviour = SimBehaviour(SimSettings(latency_ms=50), random.Random(0))
    assert (0.05, 0.05) == behaviour.timeline(10)


def test_rrcli_sim_prints_its_url_and_serves_stats() -> None:
    """``rrcli sim --port 0`` prints the URL it listens on; /stats answers there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rrcli", "sim", "--port", "0", "--cap", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
        import json
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url + "/stats", timeout=10) as response:
            stats = json.loads(response.read())
        assert (0, 0) == (stats["requests"], stats["peak_concurrency"])
    finally:
        proc.terminate()
        proc.wait(10)


def test_rrcli_sim_rejects_bad_rates_without_a_traceback() -> None:
    """A rate outside [0, 1] is a usage error naming the option (exit 2), not a traceback."""
    result = CliRunner().invoke(main, ["sim", "--error-rate", "1.5"])
    assert 2 == result.exit_code
    assert "--error-rate" in result.output
    assert "Traceback" not in result.output


def test_non_loopback_hosts_need_an_explicit_host() -> None:
    """The server refuses a non-loopback address it was not told to use explicitly."""
    from rrcli.errors import UsageError
    from rrcli.sim.server import check_host

    check_host("127.0.0.1", explicit=False)
    check_host("::1", explicit=False)
    with pytest.raises(UsageError, match="--host"):
        check_host("10.1.2.3", explicit=False)


def test_the_man_page_lists_every_option_of_rrcli_sim_help() -> None:
    """man/rrcli-sim.1 documents every option that ``rrcli sim --help`` shows."""
    help_text = CliRunner().invoke(main, ["sim", "--help"]).output
    options = set(re.findall(r"--[a-z][a-z0-9-]+", help_text))
    page = (ROOT / "man" / "rrcli-sim.1").read_text(encoding="utf-8").replace("\\-", "-")
    assert set() == {o for o in options if o not in page}


def test_both_sims_count_input_tokens_by_rrclis_one_estimate(sim_server) -> None:
    """The in-process sim and ``rrcli sim`` report input usage as rrcli estimates it
    (rrcli.tokens): a token per four characters of content, plus four a message. Here 10 + 22
    characters in two messages: 32 // 4 + 2 × 4 = 16."""
    messages = [
        {"role": "system", "content": "be concise"},
        {"role": "user", "content": "what is two plus two??"},
    ]
    (reply,), _ = run_calls(sim_backend(), [Call(messages)])
    server = sim_server()
    request = urllib.request.Request(
        server.openai_url + "/chat/completions",
        data=json.dumps({"model": "m", "messages": messages}).encode(),
        headers={"content-type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        usage = json.loads(response.read())["usage"]
    assert (16, 16) == (reply.input_tokens, usage["prompt_tokens"])
