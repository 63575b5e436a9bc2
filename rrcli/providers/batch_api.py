"""A backend's Batch API, for work that can wait a day at half the price: OpenAI's and Azure
OpenAI's files and batches, Anthropic's Message Batches, behind one small client.

``batch_client(provider)`` is the door (None for a backend without a Batch API). The client
goes through the provider's own HTTP client (``HTTPProvider.exchange``: its key, headers,
address policy, error translation), so a batch is sent as the backend's calls are. What it
returns is one normalized record a batch (``BatchState``) and one a line (``LineResult``),
whichever API answered; errors are ``ProviderError``, the key never in their text.

OpenAI and Azure: ``submit`` uploads the lines as a JSONL file (``purpose=batch``) and creates
the batch; results are the output and error files. A batch past the key's enqueued tokens is
created and then fails (``state().limit_refused``). Anthropic: ``submit`` posts the requests in
one body; past the limit the create is a 429 (``ProviderError`` with ``status_code`` 429).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from rrcli.config.urls import endpoint_url
from rrcli.errors import ProviderError
from rrcli.providers.base import invalid_response
from rrcli.providers.batch_limits import ANTHROPIC_LIMITS, OPENAI_LIMITS, BatchLimits
from rrcli.providers.scrub import scrub_error, scrub_text
from rrcli.vocabulary import anthropic_error_status

__all__ = [
    "ENDED",
    "PAGE",
    "BatchClient",
    "BatchState",
    "LineResult",
    "batch_client",
    "has_batch_api",
]

#: the statuses of a batch that will change no more
ENDED = frozenset({"completed", "expired", "cancelled", "failed"})
#: uploads and downloads move up to hundreds of MB: their time, in seconds
TRANSFER_TIMEOUT = 600.0
#: batches asked for a page of a list (the most OpenAI gives)
PAGE = 100
#: a results file's size at most, in bytes (an output is larger than its input)
RESULTS_LIMIT = 4 * 10**9
_KINDS = {"openai": "openai", "azure": "openai", "anthropic": "anthropic"}


@dataclass(frozen=True, slots=True)
class BatchState:
    """One batch as either API reports it. ``status`` is one of validating, in_progress,
    finalizing, cancelling, or (ended) completed, expired, cancelled, failed. Counts are lines:
    ``succeeded`` and ``errored`` answered, ``expired`` and ``cancelled`` not run, ``pending``
    not yet answered. Times are Unix seconds. ``error_code``/``error_message``: why a failed
    batch failed (its first error)."""

    id: str
    status: str
    total: int
    succeeded: int
    errored: int
    pending: int
    expired: int
    cancelled: int
    created_at: float
    expires_at: float | None
    output_file_id: str | None = None
    error_file_id: str | None = None
    error_code: str | None = None
    error_message: str | None = None

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def limit_refused(self) -> bool:
        """Failed for the key's enqueued-token limit: the lines may go to another key."""
        return self.error_code == "token_limit_exceeded"


@dataclass(frozen=True, slots=True)
class LineResult:
    """One line's outcome. ``ok``: ``body`` is the API's answer (a chat completion, a Message,
    an embeddings list...). Else ``error`` says why: ``expired`` or ``cancelled`` (never run),
    or the API's error type or code, with ``status`` (the line's HTTP status, when it ran) and
    ``message``. ``line_id`` is the provider's id of the line (OpenAI's ``batch_req_...``)."""

    custom_id: str
    ok: bool
    body: dict[str, Any] | None = None
    error: str | None = None
    status: int | None = None
    message: str | None = None
    line_id: str | None = None

    @property
    def transient(self) -> bool:
        """Worth running again (not run, or a failure a retry may not meet)."""
        if self.ok:
            return False
        if self.error in ("expired", "cancelled"):
            return True
        return self.status is None or self.status == 429 or self.status >= 500


def has_batch_api(provider_name: str) -> bool:
    """Whether backends of ``provider_name`` (a registry name) have a Batch API here."""
    return provider_name in _KINDS


def batch_client(provider: Any) -> BatchClient | None:
    """The Batch API client of ``provider`` (made by ``make_provider``), or None when its
    backend has none."""
    inner = getattr(provider, "inner", provider)  # the adapter under the secrets' mask
    backend = getattr(inner, "backend", None)
    if backend is None or not has_batch_api(backend.provider):
        return None
    masked = provider if inner is not provider else None
    if backend.provider == "anthropic":
        return AnthropicBatches(inner, masked)
    if backend.provider == "azure":
        return OpenAIBatches(inner, masked, inner.batch_base(), line_prefix="")
    return OpenAIBatches(inner, masked, backend.base_url, line_prefix="/v1")


class BatchClient:
    """What every Batch API client does; see the module docstring. ``api`` is ``openai`` or
    ``anthropic``, ``limits`` what one batch may hold."""

    api: str
    limits: BatchLimits

    def __init__(self, provider: Any, masked: Any = None) -> None:
        self.provider = provider
        self.backend = provider.backend
        self._masked = masked  # the provider's secrets' mask (``scrub.Redacting``), if any

    async def submit(
        self,
        lines: Sequence[tuple[str, Mapping[str, Any]]],
        *,
        endpoint: str = "chat/completions",
        metadata: Mapping[str, str] | None = None,
    ) -> BatchState:
        """A new batch of ``lines`` (custom_id, the API's request body) to ``endpoint``
        (OpenAI: ``chat/completions``, ``embeddings``...; Anthropic: Messages only).
        ValueError for lines past ``limits``, or none."""
        raise NotImplementedError

    async def state(self, batch_id: str) -> BatchState:
        raise NotImplementedError

    def results(self, state: BatchState) -> AsyncIterator[LineResult]:
        """The lines of an ended batch, each once (an empty iterator before it ends)."""
        raise NotImplementedError

    async def cancel(self, batch_id: str) -> BatchState:
        raise NotImplementedError

    async def batches(self, limit: int | None = None) -> list[BatchState]:
        """This key's batches, newest first (all of them, or the newest ``limit``)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        await self.provider.aclose()

    def _checked(self, lines: Sequence[Any], size: int) -> None:
        if not lines:
            raise ValueError("a batch needs at least one line")
        if len(lines) > self.limits.requests or size > self.limits.bytes:
            raise ValueError(
                f"{len(lines):,} lines of {size:,} bytes: past the {self.limits.requests:,} "
                f"requests or {self.limits.bytes:,} bytes one {self.api} batch may hold"
            )

    async def _listed(
        self,
        limit: int | None,
        page_url: Callable[[Mapping[str, str]], str],
        after: str,
        state: Callable[[dict[str, Any]], BatchState],
    ) -> list[BatchState]:
        """The batches a list endpoint gives, page by page (``after`` the query's name for the
        cursor: the page's ``last_id``, else its last batch's id), each read by ``state``."""
        found: list[BatchState] = []
        cursor = None
        while limit is None or len(found) < limit:
            query = {"limit": str(PAGE)}
            if cursor is not None:
                query[after] = cursor
            page = await self._json("GET", page_url(query))
            data = page.get("data") or []
            found += [state(b) for b in data]
            if not page.get("has_more") or not data:
                break
            cursor = page.get("last_id") or data[-1]["id"]
        return found if limit is None else found[:limit]

    async def _json(self, method: str, url: str, content: bytes | None = None) -> dict[str, Any]:
        raw = await self._exchange(method, url, content=content)
        return _object(raw)

    async def _jsonl(self, url: str) -> AsyncIterator[dict[str, Any]]:
        """The objects of a JSONL file at ``url`` (a batch's results), one by one, blank lines
        skipped."""
        raw = await self._exchange("GET", url, limit=RESULTS_LIMIT, timeout=TRANSFER_TIMEOUT)
        for row in raw.splitlines():
            if row.strip():
                yield _object(row)

    async def _exchange(self, method: str, url: str, **options: Any) -> bytes:
        """The provider's ``exchange``, every secret the backend sends (its key, a credential
        header's value, its URL's) masked in what comes back, error or body."""
        secrets = self._masked.secrets if self._masked is not None else ()
        try:
            raw = await self.provider.exchange(method, url, **options)
        except ProviderError as exc:
            for secret in secrets:
                exc = scrub_error(exc, secret)
            raise exc from exc.__cause__
        for secret in secrets:
            if secret.encode() in raw:
                raw = scrub_text(raw.decode("utf-8", "replace"), secret).encode()
        return raw


class OpenAIBatches(BatchClient):
    """OpenAI's and Azure OpenAI's files and batches, under ``base`` (the API's root, a
    query kept after each path); a line's ``url`` is ``line_prefix`` and the endpoint."""

    api = "openai"
    limits = OPENAI_LIMITS

    def __init__(self, provider: Any, masked: Any, base: str, *, line_prefix: str) -> None:
        super().__init__(provider, masked)
        self._base = base
        self._prefix = line_prefix

    def _url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        url = endpoint_url(self._base, path)
        if query:
            url += ("&" if "?" in url else "?") + urlencode(query)
        return url

    async def submit(
        self,
        lines: Sequence[tuple[str, Mapping[str, Any]]],
        *,
        endpoint: str = "chat/completions",
        metadata: Mapping[str, str] | None = None,
    ) -> BatchState:
        url = f"{self._prefix}/{endpoint.strip('/')}"
        rows = [
            orjson.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body})
            for cid, body in lines
        ]
        content = b"\n".join(rows) + b"\n"
        self._checked(rows, len(content))
        file_id = await self.upload(content)
        body: dict[str, Any] = {
            "input_file_id": file_id,
            "endpoint": url,
            "completion_window": "24h",
        }
        if metadata:
            body["metadata"] = dict(metadata)
        return _openai_state(await self._json("POST", self._url("/batches"), orjson.dumps(body)))

    async def upload(self, content: bytes) -> str:
        """The id of a new ``purpose=batch`` file holding ``content``."""
        boundary = os.urandom(16).hex()
        body = b"".join(
            (
                f"--{boundary}\r\n".encode(),
                b'Content-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n',
                f"--{boundary}\r\n".encode(),
                b'Content-Disposition: form-data; name="file"; filename="batch.jsonl"\r\n',
                b"Content-Type: application/jsonl\r\n\r\n",
                content,
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
        raw = await self._exchange(
            "POST", self._url("/files"), content=body, headers=headers, timeout=TRANSFER_TIMEOUT
        )
        file_id = _object(raw).get("id")
        if not isinstance(file_id, str):
            raise invalid_response("the uploaded file has no id", 200)
        return file_id

    async def state(self, batch_id: str) -> BatchState:
        return _openai_state(await self._json("GET", self._url(f"/batches/{quote(batch_id)}")))

    async def results(self, state: BatchState) -> AsyncIterator[LineResult]:
        for file_id in (state.output_file_id, state.error_file_id):
            if file_id is None:
                continue
            async for row in self._jsonl(self._url(f"/files/{quote(file_id)}/content")):
                yield _openai_line(row)

    async def cancel(self, batch_id: str) -> BatchState:
        url = self._url(f"/batches/{quote(batch_id)}/cancel")
        return _openai_state(await self._json("POST", url))

    async def batches(self, limit: int | None = None) -> list[BatchState]:
        page_url = partial(self._url, "/batches")
        return await self._listed(limit, page_url, "after", _openai_state)


class AnthropicBatches(BatchClient):
    """Anthropic's Message Batches at ``/v1/messages/batches``."""

    api = "anthropic"
    limits = ANTHROPIC_LIMITS

    def __init__(self, provider: Any, masked: Any = None) -> None:
        super().__init__(provider, masked)
        self._root = endpoint_url(self.backend.base_url, "/v1/messages/batches")

    async def submit(
        self,
        lines: Sequence[tuple[str, Mapping[str, Any]]],
        *,
        endpoint: str = "messages",
        metadata: Mapping[str, str] | None = None,
    ) -> BatchState:
        if endpoint.strip("/") not in ("messages", "v1/messages"):
            raise ValueError(f"Anthropic's Message Batches carry Messages only, not {endpoint}")
        requests = [{"custom_id": cid, "params": body} for cid, body in lines]
        content = orjson.dumps({"requests": requests})
        self._checked(requests, len(content))
        data = await self._exchange("POST", self._root, content=content, timeout=TRANSFER_TIMEOUT)
        return _anthropic_state(_object(data))

    async def state(self, batch_id: str) -> BatchState:
        return _anthropic_state(await self._json("GET", f"{self._root}/{quote(batch_id)}"))

    async def results(self, state: BatchState) -> AsyncIterator[LineResult]:
        if not state.ended:
            return
        async for row in self._jsonl(f"{self._root}/{quote(state.id)}/results"):
            yield _anthropic_line(row)

    async def cancel(self, batch_id: str) -> BatchState:
        return _anthropic_state(await self._json("POST", f"{self._root}/{quote(batch_id)}/cancel"))

    async def batches(self, limit: int | None = None) -> list[BatchState]:
        def page_url(query: Mapping[str, str]) -> str:
            return f"{self._root}?{urlencode(query)}"

        return await self._listed(limit, page_url, "after_id", _anthropic_state)


def _object(raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise invalid_response("the body is not JSON", 200) from None
    if not isinstance(data, dict):
        raise invalid_response("the body is not a JSON object", 200)
    return data


def _count(counts: Any, name: str) -> int:
    value = counts.get(name) if isinstance(counts, dict) else None
    return value if type(value) is int and value >= 0 else 0


def _openai_state(data: dict[str, Any]) -> BatchState:
    """A Batch object, normalized."""
    if not isinstance(data.get("id"), str) or not isinstance(data.get("status"), str):
        raise invalid_response("the batch has no id or status", 200)
    counts = data.get("request_counts")
    total, done, failed = (_count(counts, n) for n in ("total", "completed", "failed"))
    status = data["status"]
    rest = max(0, total - done - failed)
    errors = (data.get("errors") or {}).get("data") or [{}]
    first = errors[0] if isinstance(errors[0], dict) else {}
    return BatchState(
        id=data["id"],
        status=status,
        total=total,
        succeeded=done,
        errored=failed,
        pending=0 if status in ENDED else rest,
        expired=rest if status == "expired" else 0,
        cancelled=rest if status == "cancelled" else 0,
        created_at=float(data.get("created_at") or 0),
        expires_at=_seconds(data.get("expires_at")),
        output_file_id=data.get("output_file_id"),
        error_file_id=data.get("error_file_id"),
        error_code=first.get("code"),
        error_message=first.get("message"),
    )


def _anthropic_state(data: dict[str, Any]) -> BatchState:
    """A MessageBatch, normalized: ``ended`` becomes completed, expired or cancelled."""
    if not isinstance(data.get("id"), str):
        raise invalid_response("the message batch has no id", 200)
    counts = data.get("request_counts")
    names = ("processing", "succeeded", "errored", "expired", "canceled")
    pending, done, failed, expired, cancelled = (_count(counts, n) for n in names)
    said = data.get("processing_status")
    if said == "ended":
        cancel_asked = data.get("cancel_initiated_at") is not None
        status = "cancelled" if cancel_asked else "expired" if expired else "completed"
    else:
        status = "cancelling" if said == "canceling" else "in_progress"
    return BatchState(
        id=data["id"],
        status=status,
        total=pending + done + failed + expired + cancelled,
        succeeded=done,
        errored=failed,
        pending=pending,
        expired=expired,
        cancelled=cancelled,
        created_at=_seconds(data.get("created_at")) or 0.0,
        expires_at=_seconds(data.get("expires_at")),
    )


def _seconds(value: Any) -> float | None:
    """A time as Unix seconds: OpenAI's integers, Anthropic's RFC 3339 strings."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _openai_line(row: dict[str, Any]) -> LineResult:
    """An output or error file's line."""
    custom_id, line_id = str(row.get("custom_id")), row.get("id")
    response, error = row.get("response"), row.get("error")
    if isinstance(response, dict):
        status = response.get("status_code")
        body = response.get("body")
        if status == 200 and isinstance(body, dict):
            return LineResult(custom_id, True, body=body, line_id=line_id)
        inner = body.get("error") if isinstance(body, dict) else None
        inner = inner if isinstance(inner, dict) else {}
        return LineResult(
            custom_id,
            False,
            error=inner.get("code") or inner.get("type") or "error",
            status=status if type(status) is int else None,
            message=inner.get("message"),
            line_id=line_id,
        )
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    kind = {"batch_expired": "expired", "batch_cancelled": "cancelled"}.get(code, code)
    return LineResult(
        custom_id, False, error=kind or "error", message=error.get("message"), line_id=line_id
    )


def _anthropic_line(row: dict[str, Any]) -> LineResult:
    """A results line: succeeded, errored, expired or canceled."""
    custom_id = str(row.get("custom_id"))
    result = row.get("result") if isinstance(row.get("result"), dict) else {}
    kind = result.get("type")
    if kind == "succeeded" and isinstance(result.get("message"), dict):
        return LineResult(custom_id, True, body=result["message"])
    if kind in ("expired", "canceled"):
        return LineResult(custom_id, False, error="expired" if kind == "expired" else "cancelled")
    error = result.get("error") if isinstance(result.get("error"), dict) else {}
    inner = error.get("error") if isinstance(error.get("error"), dict) else error
    kind = inner.get("type") or "error"
    status = anthropic_error_status(kind)
    return LineResult(custom_id, False, error=kind, status=status, message=inner.get("message"))
