"""Azure OpenAI as ``rrcli sim`` answers it: OpenAI's bodies at Azure's paths, with Azure's
credentials, errors, rate-limit headers and content filter.

Paths: ``/openai/deployments/{deployment}/chat/completions`` and ``…/embeddings`` and
``/openai/responses`` take ``?api-version=`` (without one Azure answers 404 ``Resource not
found``); Azure's v1 API, ``/openai/v1/chat/completions``, ``…/embeddings``, ``…/responses``,
takes none (an api-version other than ``preview`` or ``latest`` is a 400 ``API version not
supported``). The key comes in ``api-key`` (or ``Authorization: Bearer`` for an Entra ID
token); the request id in ``apim-request-id``; error bodies are ``{"error": {"code",
"message"}}`` with the status as the code when nothing names it; rate limits as
``x-ratelimit-remaining-requests``/``-tokens`` with no reset (a 429 carries ``retry-after-ms``).
``x-sim-mode: content-filter`` refuses the prompt (a 400 ``content_filter`` with
``innererror.content_filter_result`` naming ``hate``), ``content-filter-answer`` cuts the answer
(finish reason ``content_filter``, its ``content_filter_results`` naming ``violence``);
``x-sim-status: 429`` with ``x-sim-error-code: NoCapacity`` is the region out of capacity.
"""

from __future__ import annotations

from typing import Any

import orjson

from rrcli.errors import InvalidSimRequest
from rrcli.sim.wire import Wire, _exhausted

__all__ = ["AZURE_V1_VERSIONS", "AzureWire", "azure_routes"]

#: the api-version values Azure's v1 API takes (none at all is the usual)
AZURE_V1_VERSIONS = frozenset({"preview", "latest"})
_SEVERITIES = ("hate", "self_harm", "sexual", "violence")
_DENIED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide "
    "a valid key for an active subscription and use a correct regional API endpoint for your "
    "resource."
)


def _verdicts(filtered: str) -> dict[str, Any]:
    """Azure's content filter results with ``filtered`` the one category refused."""
    out: dict[str, Any] = {
        name: {"filtered": name == filtered, "severity": "high" if name == filtered else "safe"}
        for name in _SEVERITIES
    }
    out["jailbreak"] = {"filtered": False, "detected": False}
    return out


class AzureWire(Wire):
    """``inner`` (an OpenAI endpoint's wire) spoken as Azure speaks it; ``versioned``: its path
    takes an api-version (a deployment's), else it is the v1 API's."""

    request_id_header = "apim-request-id"

    def __init__(self, inner: Wire, *, versioned: bool) -> None:
        self.inner = inner
        self.versioned = versioned
        self.streams = inner.streams  # type: ignore[misc]

    def refusal(self, query: Any) -> tuple[int, str, str | None] | None:
        """(status, message, code) for a request its path refuses by its api-version."""
        version = query.get("api-version")
        if self.versioned and not version:
            return 404, "Resource not found", "404"
        if not self.versioned and version is not None and version not in AZURE_V1_VERSIONS:
            return 400, "API version not supported", "BadRequest"
        return None

    def key(self, headers: Any) -> str | None:
        value = headers.get("authorization", "")
        return headers.get("api-key") or (value[7:] if value.startswith("Bearer ") else None)

    def limit_headers(self, spec: str) -> dict[str, str]:
        """What is left, as Azure says it: no reset (its 429 carries the wait)."""
        return {f"x-ratelimit-remaining-{kind}": "0" for kind in _exhausted(spec)}

    def error_type(self, status: int) -> str:
        return ""

    def error(self, kind: str, message: str, code: str | None, param: str | None) -> dict:
        error: dict[str, Any] = {"code": code, "message": message}
        if code == "content_filter":
            error.update(
                type=None,
                param="prompt",
                status=400,
                innererror={
                    "code": "ResponsibleAIPolicyViolation",
                    "content_filter_result": _verdicts("hate"),
                },
            )
        elif param is not None or kind:
            error.update(param=param, type=kind or None)
        return {"error": error}

    def error_body(
        self, status: int, kind: str | None, message: str, code: str | None, param: str | None
    ) -> bytes:
        if status == 401:  # Azure's words for a key it does not know
            return orjson.dumps({"error": {"code": "401", "message": _DENIED}})
        return orjson.dumps(self.error(kind or "", message, code or str(status), param))

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        if "content-filter" in modes.split(","):
            raise InvalidSimRequest(
                "The response was filtered due to the prompt triggering Azure OpenAI's content "
                "management policy.",
                "prompt",
                "content_filter",
            )
        r = self.inner.reply(sim, body, modes)
        if "content-filter-answer" in modes and "choices" in r and "pieces" in r["choices"][0]:
            for choice in r["choices"]:
                choice["pieces"] = choice["pieces"][: max(1, len(choice["pieces"]) // 2)]
                choice["finish"] = "content_filter"
            r["filtered"] = True
        return r

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        body = self.inner.plain(r)
        if body.get("object") == "chat.completion":
            body["prompt_filter_results"] = [
                {"prompt_index": 0, "content_filter_results": _verdicts("")}
            ]
            verdicts = _verdicts("violence" if r.get("filtered") else "")
            for choice in body["choices"]:
                choice["content_filter_results"] = verdicts
        return body

    def head(self, r: dict[str, Any]) -> bytes:
        return self.inner.head(r)

    def first(self, r: dict[str, Any]) -> bytes:
        return self.inner.first(r)

    def deltas(self, r: dict[str, Any], start: int, end: int) -> bytes:
        return self.inner.deltas(r, start, end)

    def tail(self, r: dict[str, Any]) -> bytes:
        tail = self.inner.tail(r)
        if not r.get("filtered"):
            return tail
        said = b'"finish_reason":"content_filter"'
        results = b',"content_filter_results":' + orjson.dumps(_verdicts("violence"))
        return tail.replace(said, said + results)

    def error_event(self, r: dict[str, Any]) -> bytes:
        return self.inner.error_event(r)


def azure_routes(openai: dict[str, Wire]) -> list[tuple[str, Wire]]:
    """Azure's paths, each with the OpenAI wire it speaks (``openai``: endpoint name → wire)."""
    deployment = "/openai/deployments/{deployment}"
    return [
        (f"{deployment}/chat/completions", AzureWire(openai["chat/completions"], versioned=True)),
        (f"{deployment}/embeddings", AzureWire(openai["embeddings"], versioned=True)),
        ("/openai/responses", AzureWire(openai["responses"], versioned=True)),
        *(
            (f"/openai/v1/{name}", AzureWire(openai[name], versioned=False))
            for name in ("chat/completions", "embeddings", "responses")
        ),
    ]
