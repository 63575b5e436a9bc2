"""The ``sim`` provider: a simulated backend in-process, with no network and no key.

It lets a profile be tried offline (the built-in ``demo`` pool) and lets the engine benchmark
measure rrcli itself: at zero latency ``send`` never sleeps and costs a few microseconds (one rng
draw when errors are configured, one checksum, one Reply). Its behaviour model
(``rrcli.sim.behaviour``) is shared with the ``rrcli sim`` server; its errors are made by the
same translation as real ones. A request with ``tools`` is answered as the server answers it:
a call of the first tool (or the one ``tool_choice`` names) with the same arguments built from
its schema; nothing else the server can say (choices, logprobs, JSON answers) is simulated here.
It serves every endpoint (``_provider_endpoints``).
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections.abc import Awaitable, Callable

from rrcli.config.profile import Backend, RetrySettings, SimSettings
from rrcli.errors import ProviderError
from rrcli.providers.base import Call, Reply, error_from_status
from rrcli.registry import server_address
from rrcli.sim import replies
from rrcli.sim._provider_endpoints import endpoint_reply
from rrcli.sim.behaviour import ERROR, SimBehaviour, last_user_text, pacing
from rrcli.sim.replies import after_tool_result, chosen_tool, fragments
from rrcli.tokens import estimate_input_tokens, rendered_prompt
from rrcli.vocabulary import tool_call

__all__ = ["SimProvider"]

_ERROR_BODY = b'{"error": {"message": "simulated server error", "type": "server_error"}}'
_LIMIT_BODY = b'{"error": {"message": "simulated rate limit", "type": "requests"}}'


class SimProvider:
    """A simulated backend following ``backend.sim`` (SimSettings), seeded for repeatable runs."""

    def __init__(
        self,
        backend: Backend,
        api_key: str | None = None,  # a simulated backend takes no key
        *,
        retry: RetrySettings,
        seed: int | None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        settings = backend.sim or SimSettings()
        self.server_address = server_address(backend.provider, backend.base_url)  # no network
        rng = random.Random(f"{seed}:{backend.id}") if seed is not None else random.Random()
        self._behaviour = SimBehaviour(settings, rng)
        self._model = backend.model
        self._retry = retry
        self._sleep = sleep
        self._clock = clock
        self._retry_headers = {"retry-after-ms": str(settings.retry_after_ms)}

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        behaviour = self._behaviour
        if behaviour.may_fail and (outcome := behaviour.outcome()):
            raise self._error(outcome)
        if call.endpoint != "chat":
            if not behaviour.instant:
                await self._sleep(behaviour.timeline(1)[1])
            return endpoint_reply(behaviour, call, self._model)
        messages = call.messages
        if "tools" in call.params and (called := _called_tool(call)) is not None:
            return await self._tool_reply(call, *called)
        variant = behaviour.variant(messages)
        tokens = call.input_tokens or estimate_input_tokens(messages)
        cached = None
        if behaviour.prefix is not None:
            prompt = rendered_prompt(messages, call.params.get("tools"), call.params.get("system"))
            cached = behaviour.cached(prompt, tokens, behaviour.text(variant))
        if behaviour.instant and not (call.stream and on_text):
            return Reply(
                behaviour.text(variant),
                "stop",
                tokens,
                behaviour.settings.output_tokens,
                self._model,
                None,
                200,
                None,
                0.0 if call.stream else None,
                cached_input_tokens=cached,
            )
        return await self._timed(call, variant, on_text, tokens, cached)

    async def _timed(
        self,
        call: Call,
        variant: int,
        on_text: Callable[[str], None] | None,
        tokens: int,
        cached: int | None,
    ) -> Reply:
        behaviour = self._behaviour
        pieces = behaviour.pieces(variant)
        ttft, total = behaviour.timeline(len(pieces), tokens - (cached or 0))
        started = self._clock()
        ttft_ms = None
        if call.stream:
            for delay, start, end in pacing(len(pieces), ttft, total):
                if delay:
                    await self._sleep(delay)
                if ttft_ms is None:
                    ttft_ms = (self._clock() - started) * 1000.0
                if on_text is not None:
                    for piece in pieces[start:end]:
                        on_text(piece)
        elif total:
            await self._sleep(total)
        return Reply(
            behaviour.text(variant),
            "stop",
            tokens,
            len(pieces),
            self._model,
            None,
            200,
            None,
            ttft_ms,
            cached_input_tokens=cached,
        )

    async def _tool_reply(self, call: Call, name: str, arguments: str, seed: int) -> Reply:
        """A call of the tool ``name``, its arguments taking as long as text of that length
        would (nothing is printed: a tool call is not output)."""
        pieces = fragments(arguments)
        ttft, total = self._behaviour.timeline(len(pieces))
        started = self._clock()
        ttft_ms = None
        if call.stream:
            if ttft:
                await self._sleep(ttft)
            ttft_ms = (self._clock() - started) * 1000.0
            total -= ttft
        if total > 0:
            await self._sleep(total)
        return Reply(
            "",
            "tool_calls",
            estimate_input_tokens(call.messages),
            len(pieces),
            self._model,
            None,
            200,
            None,
            ttft_ms,
            tool_calls=[tool_call(f"call_sim{seed:010d}", name, arguments)],
        )

    def _error(self, outcome: int) -> ProviderError:
        if outcome == ERROR:
            return error_from_status(500, {}, _ERROR_BODY, self._retry)
        return error_from_status(429, self._retry_headers, _LIMIT_BODY, self._retry)

    async def aclose(self) -> None:
        return None


def _called_tool(call: Call) -> tuple[str, str, int] | None:
    """(name, arguments JSON text, seed) of the tool the ``rrcli sim`` server would call for
    this request (the first function tool, or the one ``tool_choice`` names; none after a tool
    result or with ``tool_choice`` none); arguments a valid instance of its schema."""
    messages = call.messages
    if after_tool_result(messages):
        return None
    chosen = chosen_tool(call.params.get("tools"), call.params.get("tool_choice"))
    if chosen is None:
        return None
    seed = zlib.crc32(last_user_text(messages).encode())
    return chosen[0], replies.tool_call(chosen[1], seed)[1], seed
