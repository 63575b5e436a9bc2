"""Shared fixtures: real ``rrcli sim`` servers on free loopback ports.

``sim_server(**options)`` starts one (in this process, in a background thread, on the real
uvicorn/starlette stack) and returns a ``RunningSim``: ``.url`` is an anthropic backend's
base_url, ``.openai_url`` an openai one's, ``.stats()`` reads its ``/stats``, ``.reset()`` zeroes
them. Options are those of ``rrcli sim`` in snake case (``latency_ms``, ``cap``, ``error_rate``,
``rate_limit_rate``, ``retry_after_ms``, ``output_tokens``, ``ttft_ms``, ``tokens_per_s``,
``cut_stream_rate``, ``stream_error_rate``, ``pause_turn_rate``, ``seed``, ``model``,
``api_keys``). Every server started is stopped when the test ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from rrcli.sim.behaviour import RunningSim, config_from_options


@pytest.fixture
def sim_server() -> Iterator[Callable[..., RunningSim]]:
    """A factory of sim servers: ``server = sim_server(latency_ms=5, cap=2)``."""
    running: list[RunningSim] = []

    def start(**options: object) -> RunningSim:
        server = RunningSim(config_from_options(**options))  # type: ignore[arg-type]
        running.append(server)
        return server

    yield start
    for server in running:
        server.stop()
