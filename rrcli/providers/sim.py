"""The ``sim`` provider: a simulated backend in-process, with no network and no key.

It lets a profile be tried offline (the built-in ``demo`` pool) and lets the engine benchmark
measure rrcli itself: at zero latency ``send`` never sleeps and costs a few microseconds (one rng
draw when errors are configured, one checksum, one Reply). Its behaviour model
(``rrcli.sim.behaviour``) is shared with the ``rrcli sim`` server; its errors are made by the
same translation as real ones.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from rrcli.config.profile import Backend, RetrySettings, SimSettings
from rrcli.errors import ProviderError
from rrcli.providers.base import Call, Reply, error_from_status
from rrcli.providers.registry import server_address
from rrcli.sim.behaviour import ERROR, SimBehaviour, pacing
from rrcli.tokens import estimate_input_tokens

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
        messages = call.messages
        variant = behaviour.variant(messages)
        if behaviour.instant and not (call.stream and on_text):
            return Reply(
                behaviour.text(variant),
                "stop",
                estimate_input_tokens(messages),
                behaviour.settings.output_tokens,
                self._model,
                None,
                200,
                None,
                0.0 if call.stream else None,
            )
        return await self._timed(call, variant, on_text)

    async def _timed(
        self, call: Call, variant: int, on_text: Callable[[str], None] | None
    ) -> Reply:
        behaviour = self._behaviour
        pieces = behaviour.pieces(variant)
        ttft, total = behaviour.timeline(len(pieces))
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
            estimate_input_tokens(call.messages),
            len(pieces),
            self._model,
            None,
            200,
            None,
            ttft_ms,
        )

    def _error(self, outcome: int) -> ProviderError:
        if outcome == ERROR:
            return error_from_status(500, {}, _ERROR_BODY, self._retry)
        return error_from_status(429, self._retry_headers, _LIMIT_BODY, self._retry)

    async def aclose(self) -> None:
        return None
