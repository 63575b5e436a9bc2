"""The Batch APIs as ``rrcli sim`` serves them, so batch work runs offline.

OpenAI: ``POST /v1/files`` (multipart, ``purpose=batch``), ``GET /v1/files/{id}``, ``GET
/v1/files/{id}/content``, ``DELETE /v1/files/{id}``; ``POST /v1/batches``, ``GET
/v1/batches/{id}``, ``GET /v1/batches`` (newest first, ``after``, ``limit``), ``POST
/v1/batches/{id}/cancel``; Azure OpenAI's ``/openai/files`` and ``/openai/batches`` (with an
api-version) and ``/openai/v1/...`` the same. Anthropic: ``POST /v1/messages/batches``, ``GET
/v1/messages/batches/{id}``, ``.../results`` (JSONL), ``GET /v1/messages/batches`` (``limit``,
``after_id``, ``before_id``), ``POST .../cancel``.

Each line is answered as the sim answers the same live call (its usage too); the timeline is
``rrcli.sim.batch_model``'s. Files and batches belong to the key that made them (another key
sees a 404). Limits, refused as the APIs refuse them: an OpenAI file over 200 MB is a 400 at
upload, more than 50,000 lines fail the batch (``errors``); an Anthropic batch over 100,000
requests is a 400, over 256 MB a 413. The enqueued-token limit (``batch_enqueued_tokens``, per
key: the input tokens of its batches not ended): OpenAI creates the batch and fails it with
``token_limit_exceeded``, Anthropic answers the create with a 429 ``rate_limit_error``.

``GET /sim/batches`` says what was made: ``{"created": N, "batches": [{"id", "api", "key",
"status", "lines"}]}`` (``key`` the credential's fingerprint), so a test can see that no batch
was created twice; ``POST /sim/batches/advance?seconds=S`` moves the batch clock on.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rrcli.errors import InvalidSimRequest
from rrcli.providers.batch_limits import ANTHROPIC_LIMITS, OPENAI_LIMITS
from rrcli.sim.batch_model import SimBatch, SimLine, progress
from rrcli.sim.behaviour import key_fingerprint
from rrcli.sim.wire import Wire

__all__ = ["BatchStore", "batch_routes"]

_JSON = "application/json"
_JSONL = "application/binary"
_DAY = 86_400.0
_OPENAI_PATHS = ("chat/completions", "embeddings", "completions", "responses", "moderations")
_ANTHROPIC_ID = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_LINE_ERRORS = {
    "expired": (
        "batch_expired",
        "This request could not be executed before the completion window expired.",
    ),
    "cancelled": (
        "batch_cancelled",
        "This request was not executed because the batch was cancelled.",
    ),
}


def _stamp(seconds: float) -> str:
    """RFC 3339, as Anthropic spells a time."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def credential(headers: Any) -> str | None:
    """The key a request came with, whatever the API's header."""
    bearer = headers.get("authorization", "")
    if bearer.startswith("Bearer "):
        return bearer[7:]
    return headers.get("x-api-key") or headers.get("api-key")


class BatchStore:
    """The files and batches of one server, and the handlers of their routes. ``sim`` is the
    server (its config, behaviour, ids, counters and error bodies); ``wires`` map an OpenAI
    path (``chat/completions``) to the wire that answers it, ``anthropic`` Messages'."""

    def __init__(self, sim: Any, wires: dict[str, Wire], anthropic: Wire, families: Any) -> None:
        self.sim = sim
        self.wires = wires
        self.anthropic = anthropic
        self.openai_family, self.anthropic_family = families
        self.files: dict[str, dict[str, Any]] = {}
        self.contents: dict[str, bytes] = {}
        self.batches: dict[str, SimBatch] = {}
        self.offset = 0.0  # seconds added to the wall clock (``advance``)
        config = sim.config
        self.delay = config.batch_delay_ms / 1000.0
        self.window = _DAY if config.batch_window_ms is None else config.batch_window_ms / 1000.0

    def now(self) -> float:
        return time.time() + self.offset

    # --- what every handler does first --------------------------------------------------

    def guarded(self, handler: Any, wire: Wire) -> Any:
        """The route handler calling ``handler(request, body, key)`` once the request is
        counted; a key the server does not take is a 401 in ``wire``'s shape."""

        async def answer(request: Request) -> Response:
            raw = await request.body()
            self.sim._receive(request, raw)
            headers = request.headers
            self.sim.state.count_credentials(headers)
            key = credential(headers)
            keys = self.sim.config.api_keys
            if keys and key not in keys:
                return self.sim.error(
                    wire, 401, "invalid API key", "authentication_error", "invalid_api_key"
                )
            return await handler(request, raw, key)

        return answer

    def _mine(self, batch_id: str, key: str | None, api: str) -> SimBatch | None:
        batch = self.batches.get(batch_id)
        if batch is None or batch.key != key or batch.api != api:
            return None
        progress(batch, self.now(), self.delay, self.window)
        if batch.ended is not None and batch.api == "openai" and not batch.files:
            self._write_files(batch)
        return batch

    def _json(self, data: Any, status: int = 200) -> Response:
        return Response(orjson.dumps(data), status_code=status, media_type=_JSON)

    # --- OpenAI files -------------------------------------------------------------------

    async def upload(self, request: Request, raw: bytes, key: str | None) -> Response:
        wire = self.openai_family
        try:
            fields = _multipart(request.headers.get("content-type", ""), raw)
        except InvalidSimRequest as exc:
            return self.sim.error(wire, 400, exc.message, param=exc.param, code=exc.code)
        purpose, upload = fields.get("purpose"), fields.get("file")
        if purpose is None or upload is None:
            missing = "purpose" if purpose is None else "file"
            return self.sim.error(
                wire, 400, f"Missing required parameter: '{missing}'.", param=missing
            )
        name, content = upload
        if purpose.decode() == "batch" and len(content) > OPENAI_LIMITS.bytes:
            message = (
                f"File is too large: {len(content)} bytes, more than the "
                f"{OPENAI_LIMITS.bytes // 10**6} MB a batch input file may be."
            )
            return self.sim.error(wire, 400, message, param="file", code="file_too_large")
        made = self._file(key, name or "upload.jsonl", purpose.decode(), content)
        return self._json(made)

    def _file(self, key: str | None, name: str, purpose: str, content: bytes) -> dict[str, Any]:
        file_id = self.sim.next_id("file-sim")
        made = {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(self.now()),
            "filename": name,
            "purpose": purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }
        self.files[file_id] = {**made, "key": key}
        self.contents[file_id] = content
        return made

    def _own_file(self, request: Request, key: str | None) -> dict[str, Any] | None:
        found = self.files.get(request.path_params["file_id"])
        return found if found is not None and found["key"] == key else None

    async def file(self, request: Request, _raw: bytes, key: str | None) -> Response:
        wire = self.openai_family
        found = self._own_file(request, key)
        if found is None:
            return self._no_file(wire, request)
        if request.method == "DELETE":
            del self.files[found["id"]]
            del self.contents[found["id"]]
            return self._json({"id": found["id"], "object": "file", "deleted": True})
        return self._json({k: v for k, v in found.items() if k != "key"})

    async def content(self, request: Request, _raw: bytes, key: str | None) -> Response:
        wire = self.openai_family
        found = self._own_file(request, key)
        if found is None:
            return self._no_file(wire, request)
        return Response(self.contents[found["id"]], media_type=_JSONL)

    def _no_file(self, wire: Wire, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        return self.sim.error(wire, 404, f"No such File object: {file_id}", param="id")

    # --- OpenAI batches -----------------------------------------------------------------

    async def create(self, request: Request, raw: bytes, key: str | None) -> Response:
        wire = self.openai_family
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return self.sim.error(wire, 400, "the request body is not a JSON object")
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(body.get(name), str):
                message = f"Missing required parameter: '{name}'."
                return self.sim.error(wire, 400, message, param=name)
        if body["completion_window"] != "24h":
            message = "Invalid value for 'completion_window': only '24h' is supported."
            return self.sim.error(wire, 400, message, param="completion_window")
        endpoint = body["endpoint"]
        found = self.files.get(body["input_file_id"])
        if found is None or found["key"] != key:
            message = f"No such File object: {body['input_file_id']}"
            return self.sim.error(wire, 404, message, param="input_file_id")
        lines, errors = self._openai_lines(self.contents[found["id"]], endpoint)
        batch = SimBatch(
            id=self.sim.next_id("batch_sim"),
            api="openai",
            key=key,
            created=self.now(),
            lines=lines,
            endpoint=endpoint,
            input_file_id=found["id"],
            metadata=body.get("metadata"),
            errors=errors or None,
        )
        if batch.errors is None:
            batch.errors = self._over_limit(batch)
        self.batches[batch.id] = batch
        return self._json(self._openai_batch(batch, "validating", 0))

    def _openai_lines(
        self, content: bytes, endpoint: str
    ) -> tuple[list[SimLine], list[dict[str, Any]]]:
        """The file's lines answered, or the errors that fail the batch (each naming its line)."""
        path = _path(endpoint)
        wire = self.wires.get(path)
        if wire is None:
            error = {"code": "invalid_endpoint", "message": f"Unsupported endpoint {endpoint}"}
            return [], [{**error, "param": "endpoint", "line": None}]
        rows = [row for row in content.splitlines() if row.strip()]
        if len(rows) > OPENAI_LIMITS.requests:
            message = (
                f"The batch input file has {len(rows)} requests, more than the "
                f"{OPENAI_LIMITS.requests:,} a batch may hold."
            )
            return [], [
                {"code": "too_many_requests", "message": message, "param": None, "line": None}
            ]
        lines, errors, seen = [], [], set()
        for number, row in enumerate(rows, 1):
            fault = _openai_fault(row, path, seen)
            if isinstance(fault, str):
                errors.append(
                    {"code": "invalid_request", "message": fault, "param": None, "line": number}
                )
                continue
            lines.append(self._answer(fault["custom_id"], wire, fault["body"]))
        return lines, errors

    def _answer(self, custom_id: str, wire: Wire, body: Any) -> SimLine:
        """The line answered as the live call is: its reply (and its input tokens), a refusal
        (a 400), or a drawn failure (a 500)."""
        sim = self.sim
        if not isinstance(body, dict):
            error = wire.error(wire.error_type(400), "'body' must be a JSON object", None, "body")
            return SimLine(custom_id, 400, error, 0)
        try:
            reply = wire.reply(sim, body, "")
        except InvalidSimRequest as exc:
            error = wire.error(wire.error_type(400), exc.message, exc.code, exc.param)
            return SimLine(custom_id, 400, error, 0)
        plain = wire.plain(reply)
        tokens = _input_tokens(plain.get("usage"))
        if sim.behaviour.chance(sim.config.batch_failure_rate):
            error = wire.error(wire.error_type(500), "simulated server error", None, None)
            return SimLine(custom_id, 500, error, tokens)
        return SimLine(custom_id, 200, plain, tokens)

    def _enqueued(self, key: str | None, but: SimBatch) -> int:
        """Input tokens of ``key``'s batches on ``but``'s API not ended (``but`` aside)."""
        now, total = self.now(), 0
        for batch in self.batches.values():
            if batch.key == key and batch.api == but.api and batch is not but:
                progress(batch, now, self.delay, self.window)
                total += batch.tokens if batch.ended is None else 0
        return total

    def _over_limit(self, batch: SimBatch) -> list[dict[str, Any]] | None:
        """OpenAI's failure of a batch past the key's enqueued-token limit, or None."""
        limit = self.sim.config.batch_enqueued_tokens
        if limit is None or self._enqueued(batch.key, batch) + batch.tokens <= limit:
            return None
        model = _model(batch) or "sim-model"
        message = (
            f"Enqueued token limit reached for {model} in organization org-sim. Limit: "
            f"{limit:,} enqueued tokens. Please try again once some in_progress batches have "
            "been completed."
        )
        return [{"code": "token_limit_exceeded", "message": message, "param": None, "line": None}]

    async def retrieve(self, request: Request, _raw: bytes, key: str | None) -> Response:
        wire = self.openai_family
        batch = self._mine(request.path_params["batch_id"], key, "openai")
        if batch is None:
            return self._no_batch(wire, request)
        return self._json(self._openai_batch(batch))

    async def cancel(self, request: Request, _raw: bytes, key: str | None) -> Response:
        wire = self.openai_family
        batch = self._mine(request.path_params["batch_id"], key, "openai")
        if batch is None:
            return self._no_batch(wire, request)
        if batch.ended is not None:
            message = f"Cannot cancel a batch with status '{batch.outcome}'."
            return self.sim.error(wire, 409, message)
        batch.cancelled = self.now()
        return self._json(self._openai_batch(batch, "cancelling"))

    async def listing(self, request: Request, _raw: bytes, key: str | None) -> Response:
        query = request.query_params
        page, more = self._page(key, "openai", query.get("limit"), query.get("after"), None)
        data = [self._openai_batch(b) for b in page]
        first = data[0]["id"] if data else None
        last = data[-1]["id"] if data else None
        return self._json(
            {"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more}
        )

    def _page(
        self, key: str | None, api: str, limit: str | None, after: str | None, before: str | None
    ) -> tuple[list[SimBatch], bool]:
        """``key``'s batches newest first, after (or before) the one named, ``limit`` of them."""
        mine = [b for b in reversed(self.batches.values()) if b.key == key and b.api == api]
        ids = [b.id for b in mine]
        if after in ids:
            mine = mine[ids.index(after) + 1 :]
        elif before in ids:
            mine = mine[: ids.index(before)]
        count = int(limit) if limit and limit.isdigit() else 20
        count = max(1, min(count, 100 if api == "openai" else 1000))
        for batch in mine[:count]:
            self._mine(batch.id, key, api)
        return mine[:count], len(mine) > count

    def _no_batch(self, wire: Wire, request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        return self.sim.error(wire, 404, f"No batch found with id '{batch_id}'.")

    def _openai_batch(
        self, batch: SimBatch, status: str | None = None, done: int | None = None
    ) -> dict[str, Any]:
        """The Batch object (``status``/``done`` given: as the create or cancel says it)."""
        now_status, now_done = progress(batch, self.now(), self.delay, self.window)
        status = status or now_status
        done = now_done if done is None else done
        answered = batch.lines[:done]
        failed = sum(1 for line in answered if line.status != 200)
        created = int(batch.created)
        stamps: dict[str, int | None] = dict.fromkeys(
            (
                "in_progress_at",
                "finalizing_at",
                "completed_at",
                "failed_at",
                "expired_at",
                "cancelling_at",
                "cancelled_at",
            ),
        )
        if batch.cancelled is not None:
            stamps["cancelling_at"] = int(batch.cancelled)
        if batch.ended is not None:
            stamps[f"{batch.outcome}_at"] = int(batch.ended)
        if batch.outcome in ("completed", "expired") or status in ("in_progress", "finalizing"):
            stamps["in_progress_at"] = created
        errors = None
        if batch.errors is not None:
            errors = {"object": "list", "data": batch.errors}
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "model": _model(batch),
            "errors": errors,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.files.get("output"),
            "error_file_id": batch.files.get("error"),
            "created_at": created,
            "expires_at": int(batch.created + _DAY),
            **stamps,
            "request_counts": {
                "total": len(batch.lines),
                "completed": len(answered) - failed,
                "failed": failed,
            },
            "usage": _usage(answered),
            "metadata": batch.metadata,
        }

    def _write_files(self, batch: SimBatch) -> None:
        """An ended OpenAI batch's output file (the 200s) and error file (the rest)."""
        if batch.outcome == "failed":
            batch.files["failed"] = ""
            return
        ok, bad = [], []
        for number, line in enumerate(batch.lines):
            row: dict[str, Any] = {
                "id": f"batch_req_{batch.id}_{number}",
                "custom_id": line.custom_id,
            }
            if number >= batch.done:
                code, message = _LINE_ERRORS[batch.outcome]
                bad.append({**row, "response": None, "error": {"code": code, "message": message}})
                continue
            response = {
                "status_code": line.status,
                "request_id": f"req_{batch.id}_{number}",
                "body": line.body,
            }
            (ok if line.status == 200 else bad).append({**row, "response": response, "error": None})
        for name, rows in (("output", ok), ("error", bad)):
            if rows:
                content = b"".join(orjson.dumps(r) + b"\n" for r in rows)
                made = self._file(batch.key, f"{batch.id}_{name}.jsonl", f"batch_{name}", content)
                batch.files[name] = made["id"]

    # --- Anthropic Message Batches ------------------------------------------------------

    async def anthropic_create(self, request: Request, raw: bytes, key: str | None) -> Response:
        wire = self.anthropic_family
        if len(raw) > ANTHROPIC_LIMITS.bytes:
            message = f"Request exceeds the maximum size of {ANTHROPIC_LIMITS.bytes // 10**6} MB."
            return self.sim.error(wire, 413, message, "request_too_large")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        requests = body.get("requests") if isinstance(body, dict) else None
        fault = _anthropic_fault(requests)
        if fault is not None:
            return self.sim.error(wire, 400, fault, "invalid_request_error")
        lines = [self._answer(r["custom_id"], self.anthropic, r["params"]) for r in requests]
        batch = SimBatch(
            id=self.sim.next_id("msgbatch_sim"),
            api="anthropic",
            key=key,
            created=self.now(),
            lines=lines,
        )
        limit = self.sim.config.batch_enqueued_tokens
        if limit is not None and self._enqueued(key, batch) + batch.tokens > limit:
            message = (
                f"Number of enqueued batch tokens exceeds your limit of {limit:,}; retry once "
                "some of your batches have ended."
            )
            return self.sim.error(wire, 429, message, "rate_limit_error")
        self.batches[batch.id] = batch
        return self._json(self._anthropic_batch(batch, request))

    async def anthropic_retrieve(self, request: Request, _raw: bytes, key: str | None) -> Response:
        wire = self.anthropic_family
        batch = self._mine(request.path_params["batch_id"], key, "anthropic")
        if batch is None:
            return self.sim.error(wire, 404, "Not found", "not_found_error")
        return self._json(self._anthropic_batch(batch, request))

    async def anthropic_results(self, request: Request, _raw: bytes, key: str | None) -> Response:
        wire = self.anthropic_family
        batch = self._mine(request.path_params["batch_id"], key, "anthropic")
        if batch is None:
            return self.sim.error(wire, 404, "Not found", "not_found_error")
        if batch.ended is None:
            message = f"Batch {batch.id} is still processing; its results come once it has ended."
            return self.sim.error(wire, 400, message, "invalid_request_error")
        rows = []
        for number, line in enumerate(batch.lines):
            if number >= batch.done:
                result: dict[str, Any] = {
                    "type": "expired" if batch.outcome == "expired" else "canceled"
                }
            elif line.status == 200:
                result = {"type": "succeeded", "message": line.body}
            else:
                result = {"type": "errored", "error": line.body}
            rows.append(orjson.dumps({"custom_id": line.custom_id, "result": result}) + b"\n")
        return Response(b"".join(rows), media_type="application/x-jsonl")

    async def anthropic_cancel(self, request: Request, _raw: bytes, key: str | None) -> Response:
        wire = self.anthropic_family
        batch = self._mine(request.path_params["batch_id"], key, "anthropic")
        if batch is None:
            return self.sim.error(wire, 404, "Not found", "not_found_error")
        if batch.ended is None:
            batch.cancelled = self.now()
        return self._json(self._anthropic_batch(batch, request, "canceling"))

    async def anthropic_listing(self, request: Request, _raw: bytes, key: str | None) -> Response:
        query = request.query_params
        page, more = self._page(
            key, "anthropic", query.get("limit"), query.get("after_id"), query.get("before_id")
        )
        data = [self._anthropic_batch(b, request) for b in page]
        first = data[0]["id"] if data else None
        last = data[-1]["id"] if data else None
        return self._json({"data": data, "has_more": more, "first_id": first, "last_id": last})

    def _anthropic_batch(
        self, batch: SimBatch, request: Request, status: str | None = None
    ) -> dict[str, Any]:
        outcome, done = progress(batch, self.now(), self.delay, self.window)
        ended = batch.ended is not None
        answered = batch.lines[:done]
        errored = sum(1 for line in answered if line.status != 200)
        rest = len(batch.lines) - done
        counts = {
            "processing": 0 if ended else rest,
            "succeeded": len(answered) - errored,
            "errored": errored,
            "canceled": rest if ended and outcome == "cancelled" else 0,
            "expired": rest if ended and outcome == "expired" else 0,
        }
        if status is None:
            status = "ended" if ended else "canceling" if batch.cancelled else "in_progress"
        base = str(request.base_url).rstrip("/")
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "ended_at": _stamp(batch.ended) if ended else None,
            "created_at": _stamp(batch.created),
            "expires_at": _stamp(batch.created + _DAY),
            "archived_at": None,
            "cancel_initiated_at": _stamp(batch.cancelled) if batch.cancelled else None,
            "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if ended else None,
        }

    # --- what a test reads --------------------------------------------------------------

    async def report(self, request: Request) -> Response:
        """``GET /sim/batches``: how many batches were made, and each one's state."""
        made = []
        for batch in self.batches.values():
            status, _ = progress(batch, self.now(), self.delay, self.window)
            key = key_fingerprint(batch.key) if batch.key else None
            made.append(
                {
                    "id": batch.id,
                    "api": batch.api,
                    "key": key,
                    "status": status,
                    "lines": len(batch.lines),
                }
            )
        return self._json({"created": len(made), "batches": made})

    async def advance(self, request: Request) -> Response:
        seconds = request.query_params.get("seconds", "0")
        try:
            self.offset += max(0.0, float(seconds))
        except ValueError:
            return self._json({"error": f"seconds: expected a number, got {seconds!r}"}, 400)
        return self._json({"offset": self.offset})


def _model(batch: SimBatch) -> str | None:
    for line in batch.lines:
        if line.status == 200:
            return line.body.get("model")
    return None


def _input_tokens(usage: Any) -> int:
    """A reply's input tokens, in either API's usage."""
    if not isinstance(usage, dict):
        return 0
    if "prompt_tokens" in usage:
        return int(usage["prompt_tokens"])
    return int(usage.get("input_tokens", 0)) + int(usage.get("cache_read_input_tokens", 0))


def _usage(lines: list[SimLine]) -> dict[str, Any]:
    """The Batch object's usage: the answered lines' tokens summed."""
    given = taken = 0
    for line in lines:
        usage = line.body.get("usage") if line.status == 200 else None
        if isinstance(usage, dict):
            given += _input_tokens(usage)
            taken += int(usage.get("completion_tokens", usage.get("output_tokens", 0)))
    return {
        "input_tokens": given,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": taken,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": given + taken,
    }


def _path(url: str) -> str:
    """An endpoint as OpenAI (``/v1/embeddings``) or Azure (``/embeddings``) names it, alike."""
    return url.removeprefix("/").removeprefix("v1/")


def _openai_fault(row: bytes, path: str, seen: set[str]) -> dict[str, Any] | str:
    """The line's custom_id and body, or why the batch fails for it."""
    try:
        line = orjson.loads(row)
    except orjson.JSONDecodeError:
        return "This line is not parseable as valid JSON."
    if not isinstance(line, dict):
        return "This line is not a JSON object."
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return "Missing required parameter: 'custom_id'."
    if custom_id in seen:
        return f"The custom_id '{custom_id}' is used by another line; each must be unique."
    seen.add(custom_id)
    if line.get("method") != "POST":
        return "Invalid value for 'method': only POST is supported."
    url = str(line.get("url", ""))
    if _path(url) != path:
        return f"The url '{url}' does not match the batch's endpoint."
    return {"custom_id": custom_id, "body": line.get("body")}


def _anthropic_fault(requests: Any) -> str | None:
    """Why Anthropic refuses a batch's ``requests``, or None."""
    if not isinstance(requests, list) or not requests:
        return "requests: Field required (a non-empty list)"
    if len(requests) > ANTHROPIC_LIMITS.requests:
        return (
            f"requests: a batch holds at most {ANTHROPIC_LIMITS.requests:,} requests, got "
            f"{len(requests):,}"
        )
    seen: set[str] = set()
    for number, item in enumerate(requests):
        custom_id = item.get("custom_id") if isinstance(item, dict) else None
        if (
            not isinstance(custom_id, str)
            or not 0 < len(custom_id) <= 64
            or not set(custom_id) <= _ANTHROPIC_ID
        ):
            return f"requests.{number}.custom_id: expected 1 to 64 letters, digits, - or _"
        if custom_id in seen:
            return f"requests.{number}.custom_id: '{custom_id}' is not unique in the batch"
        seen.add(custom_id)
        if not isinstance(item.get("params"), dict):
            return f"requests.{number}.params: Field required"
    return None


def _multipart(content_type: str, raw: bytes) -> dict[str, Any]:
    """A multipart/form-data body's fields: text fields as bytes, a file as (name, bytes)."""
    if not content_type.startswith("multipart/form-data"):
        raise InvalidSimRequest("expected a multipart/form-data body", "file")
    head = b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n"
    message = BytesParser(policy=HTTP).parsebytes(head + raw)
    if not message.is_multipart():
        raise InvalidSimRequest("the multipart body has no parts", "file")
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        fields[str(name)] = (filename, payload) if filename is not None else payload.strip()
    return fields


def batch_routes(store: BatchStore) -> list[Route]:
    """The routes of the Batch APIs (OpenAI's at ``/v1`` and Azure's two roots; Anthropic's)."""
    openai = [
        ("/files", store.upload, "POST"),
        ("/files/{file_id}", store.file, "GET"),
        ("/files/{file_id}", store.file, "DELETE"),
        ("/files/{file_id}/content", store.content, "GET"),
        ("/batches", store.create, "POST"),
        ("/batches", store.listing, "GET"),
        ("/batches/{batch_id}", store.retrieve, "GET"),
        ("/batches/{batch_id}/cancel", store.cancel, "POST"),
    ]
    family = store.openai_family
    routes = [
        Route(root + path, store.guarded(handler, family), methods=[method])
        for root in ("/v1", "/openai", "/openai/v1")
        for path, handler, method in openai
    ]
    anthropic = [
        ("", store.anthropic_create, "POST"),
        ("", store.anthropic_listing, "GET"),
        ("/{batch_id}", store.anthropic_retrieve, "GET"),
        ("/{batch_id}/results", store.anthropic_results, "GET"),
        ("/{batch_id}/cancel", store.anthropic_cancel, "POST"),
    ]
    family = store.anthropic_family
    routes += [
        Route("/v1/messages/batches" + path, store.guarded(handler, family), methods=[method])
        for path, handler, method in anthropic
    ]
    routes += [
        Route("/sim/batches", store.report, methods=["GET"]),
        Route("/sim/batches/advance", store.advance, methods=["POST"]),
    ]
    return routes
