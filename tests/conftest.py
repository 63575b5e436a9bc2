"""Shared fixtures: real ``rrcli sim`` servers on free loopback ports.

``sim_server(**options)`` starts one (in this process, in a background thread, on the real
uvicorn/starlette stack) and returns a ``RunningSim``: ``.url`` is an anthropic backend's
base_url, ``.openai_url`` an openai one's, ``.stats()`` reads its ``/stats``, ``.received()`` the
requests it was sent (``/requests``: path, headers, parsed body), ``.reset()`` zeroes both.
Options are those of ``rrcli sim`` in snake case (``latency_ms``, ``cap``, ``error_rate``,
``rate_limit_rate``, ``retry_after_ms``, ``output_tokens``, ``ttft_ms``, ``tokens_per_s``,
``cut_stream_rate``, ``stream_error_rate``, ``pause_turn_rate``, ``seed``, ``model``,
``api_keys``). Every server started is stopped when the test ends.

``canned(answer)`` and ``canned_server(answer)`` (tests/canned.py) start a server answering with
exactly what a test says; ``hostile_server(answer)`` (tests/hostile.py) one that misbehaves on
purpose, byte for byte.

Hypothesis runs without its per-example deadline and its too-slow health check: both time the
examples by the wall clock, which a loaded 2-core CI machine stretches; the properties keep
their number of examples.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from billing import billing_server  # noqa: F401  (fixture: a server that bills every token)
from canned import canned, canned_server  # noqa: F401  (fixtures: a canned HTTP server)
from hostile import hostile_server  # noqa: F401  (fixture: a server that misbehaves on purpose)
from hypothesis import HealthCheck, settings

from rrcli.sim.behaviour import SimConfig, config_from_options
from rrcli.sim.server import listen, uvicorn_server

settings.register_profile("rrcli", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rrcli")


@pytest.fixture(autouse=True, scope="session")
def _regex_strategies_imported() -> None:
    """Hypothesis imports its regex strategies when from_regex is first drawn from, deep in a
    draw's stack, where Python 3.11's parser (pytest rewrites the module as it is imported) can
    raise a spurious "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905)
    and fail whichever property test drew first: they are imported before any test runs."""
    import hypothesis.strategies._internal.regex  # noqa: F401


class RunningSim:
    """A sim server running in a background thread of this process.

    ``url`` is ``http://host:port``: the base_url of an anthropic backend; add ``/v1`` for an
    openai one (``openai_url``). ``stop()`` shuts it down.
    """

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self._sock = listen(host, port)
        self.url = f"http://{host}:{self._sock.getsockname()[1]}"
        self.openai_url = self.url + "/v1"
        self._server = uvicorn_server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10.0
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the sim server at {self.url} did not start")
            time.sleep(0.002)

    def stats(self) -> dict[str, Any]:
        """What the server saw (``GET /stats``): requests, peak_concurrency, rate_limited..."""
        return self._get("/stats")

    def reset(self) -> dict[str, Any]:
        """Zero the counters and forget the requests received (``/stats/reset``)."""
        return self._get("/stats/reset")

    def received(self, path: str | None = None) -> list[dict[str, Any]]:
        """The last requests the server was sent, oldest first (``GET /requests``): each
        ``{"seq", "method", "path", "headers", "body"}``; ``path`` keeps one path's
        (``"/v1/embeddings"``)."""
        query = "?" + urllib.parse.urlencode({"path": path}) if path else ""
        return self._get("/requests" + query)["requests"]

    def _get(self, path: str) -> dict[str, Any]:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        """Stop at once: requests still in flight (a 60 s latency) are dropped, not awaited."""
        self._server.should_exit = self._server.force_exit = True
        self._thread.join(10.0)
        self._sock.close()


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
