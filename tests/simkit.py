"""Helpers for tests that talk to ``rrcli sim`` over HTTP: a POST, and a stream's events parsed
as a client reads them (OpenAI ``data:`` lines ending at ``[DONE]``; named events, as Anthropic
and the Responses API send them)."""

from __future__ import annotations

import json
from typing import Any

import httpx2


def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx2.Response:
    """POST ``body`` as JSON to ``url`` with a fresh client."""
    with httpx2.Client(timeout=10) as client:
        return client.post(url, json=body, headers=headers or {})


def data_lines(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON of each SSE ``data:`` line; the stream must end with ``[DONE]``."""
    lines = [ln[6:] for ln in response.text.splitlines() if ln.startswith("data: ")]
    assert "[DONE]" == lines[-1]
    return [json.loads(line) for line in lines[:-1]]


def events(response: httpx2.Response) -> list[dict[str, Any]]:
    """The data of each named SSE event (its ``event:`` name must equal its ``type``)."""
    out = []
    for block in response.text.strip().split("\n\n"):
        name, data = block.split("\n", 1)
        payload = json.loads(data.removeprefix("data: "))
        assert name.removeprefix("event: ") == payload["type"]
        out.append(payload)
    return out
