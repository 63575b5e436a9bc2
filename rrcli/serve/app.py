"""The gateway's endpoints: each API request a job for one of the pools (``request_job``),
answered from its reply in the client's API (``dispatch.Routes`` is the ASGI app over them).

The request's ``model`` picks the pool: a profile's name (every backend of it) or a model id its
backends serve (those backends only). A plain call is awaited while the client is watched: a
client that goes away cancels it, and its slot is freed. A streamed call starts its answer at
the first piece of text (until then a retry or a failover is still possible, and an error still
gets its status), then relays each piece as it comes; the record's end (tool calls, finish
reason, usage) closes it. Every answer says its ``x-rrcli-deployment`` and, once the call is over,
``x-rrcli-attempts``.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from rrcli.errors import CallError
from rrcli.pool.pool import CLIENT_LEFT, Pool, settled
from rrcli.records.attempt import CallOutcome
from rrcli.records.jobs import InvalidJob, Job, request_job
from rrcli.serve.counting import count_tokens
from rrcli.serve.dispatch import ON_GONE, Json, Routes, header_of
from rrcli.serve.gateway import Gateway, read_headers
from rrcli.serve.metrics import CONTENT_TYPE
from rrcli.serve.sessions import session_of
from rrcli.serve.upstream import told
from rrcli.serve.wires import ANTHROPIC, OPENAI, Wire

__all__ = ["build_app"]

_JSON = "application/json"
_OPENAI_PATHS = {
    "chat/completions": "chat",
    "embeddings": "embeddings",
    "responses": "responses",
    "completions": "completions",
    "moderations": "moderations",
}
#: the numbers of the requests' jobs (the trace's ``job_id`` ``req_<n>``, whichever API the
#: request came in), one sequence for the process
_IDS = itertools.count(1)
#: why a request was refused before any backend was asked (serve.metrics.REFUSALS), by the
#: status it was answered: a refusal's status says its reason
_REFUSED = {
    401: "unauthorized",
    413: "too_large",
    400: "invalid_request",
    404: "unknown_model",
    429: "cooling",
    503: "draining",
}
#: ... and by the type of a call's error that no backend was asked for
_NOT_ASKED = {"invalid_job": "invalid_request", "budget": "budget"}


def build_app(gateway: Gateway) -> Routes:
    """The app: both APIs (also under ``/s/{session}``), /health, /ready, /metrics,
    /v1/models."""
    get, post = frozenset({"GET", "HEAD"}), frozenset({"POST"})
    table = {
        "/health": (get, _health(gateway)),
        "/ready": (get, _ready(gateway)),
        "/metrics": (get, _metrics(gateway)),
        "/v1/models": (get, _models(gateway)),
        "/v1/messages": (post, _api(gateway, ANTHROPIC, "chat")),
        "/v1/messages/count_tokens": (post, _api(gateway, ANTHROPIC, "count_tokens")),
    }
    for path, endpoint in _OPENAI_PATHS.items():
        table[f"/v1/{path}"] = (post, _api(gateway, OPENAI, endpoint))
    return Routes(table, frozenset(p for p in table if p.startswith("/v1/")))


def _health(gateway: Gateway) -> Any:
    async def health(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type=_JSON)

    return health


def _ready(gateway: Gateway) -> Any:
    async def ready(request: Request) -> Response:
        healthy = not gateway.draining and any(pool.engine.status().ready for pool in gateway.pools)
        status = 200 if healthy else 503
        body = orjson.dumps({"ready": healthy})
        return Response(body, status_code=status, media_type=_JSON)

    return ready


def _metrics(gateway: Gateway) -> Any:
    async def metrics(request: Request) -> Response:
        keyed = gateway.settings.open_metrics or gateway.authorized(read_headers(request.scope))
        if not keyed:
            return _unauthorized(gateway, "metrics")
        return Response(gateway.metrics.render(), media_type=CONTENT_TYPE)

    return metrics


def _models(gateway: Gateway) -> Any:
    async def models(request: Request) -> Response:
        if not gateway.authorized(read_headers(request.scope)):
            return _unauthorized(gateway, "models")
        data = [{"id": m, "object": "model", "owned_by": "rrcli"} for m in gateway.models()]
        return Response(orjson.dumps({"object": "list", "data": data}), media_type=_JSON)

    return models


def _unauthorized(gateway: Gateway, endpoint: str) -> Response:
    """A GET without the client key: 401, counted as the API requests' refusals are."""
    gateway.metrics.refused(OPENAI.name, endpoint, "unauthorized", 401, _NO_KEY)
    return _error(OPENAI, 401, _NO_KEY)


def _api(gateway: Gateway, wire: Wire, endpoint: str) -> Any:
    metrics = gateway.metrics

    async def handle(request: Request) -> Response:
        gateway.in_flight += 1
        started = time.monotonic()
        status, streamed, deployment = 500, False, None
        try:
            response = await _handle(gateway, wire, endpoint, request)
            status = response.status_code
            deployment = header_of(response, b"x-rrcli-deployment")
            streamed = isinstance(response, StreamingResponse)
            if isinstance(response, Json) and response.refused is not None:
                reason, message = response.refused
                metrics.refused(wire.name, endpoint, reason, status, message)
            return response
        finally:
            gateway.in_flight -= 1
            seconds = time.monotonic() - started
            metrics.observe(wire.name, endpoint, status, seconds, streamed, deployment)

    return handle


def _error(wire: Wire, status: int, message: str, **headers: str) -> Response:
    """A request refused before any backend was asked, in ``wire``'s error shape."""
    response = Json(wire.error(status, message), status, headers)
    response.refused = (_REFUSED[status], message)
    return response


async def _handle(gateway: Gateway, wire: Wire, endpoint: str, request: Request) -> Response:
    """One API request: refused (draining, key, size, JSON, model), else a job for its pool."""
    if gateway.draining:
        return _error(wire, 503, "the server is shutting down — send the request to another")
    heads = read_headers(request.scope)
    if not gateway.authorized(heads):
        return _error(wire, 401, _NO_KEY)
    body = await _body(request, heads, gateway.settings.max_body_bytes)
    if isinstance(body, Response):
        return body if body.status_code != 400 else _error(wire, 400, _NOT_JSON)
    if body is None:
        limit = gateway.settings.max_body_bytes
        return _error(wire, 413, f"the request body is over {limit} bytes")
    chosen = gateway.pick(body.get("model"))
    if chosen is None:
        served = ", ".join(gateway.models())
        return _error(
            wire, 404, f"model {body.get('model')!r} is not served here; served: {served}"
        )
    pool, exclude = chosen
    if endpoint == "count_tokens":
        return await _counted(pool, exclude, body)
    wait = gateway.cooling(pool, exclude)
    if wait is not None:
        after = str(max(1, math.ceil(wait)))
        return _error(
            wire,
            429,
            f"every backend is cooling down — retry in {after} s",
            **{"retry-after": after},
        )
    session = session_of(request.path_params.get("session"), heads, body)
    job = request_job(wire.name, endpoint, body, id=f"req_{next(_IDS)}", session=session)
    ended = None if session is None else gateway.sessions.begin(session)
    if type(job) is Job and job.stream:
        return await _streamed(wire, pool, job, exclude, request, ended)
    return await _plain(wire, pool, job, exclude, request, ended)


_NOT_JSON = "the request body is not a JSON object"
_NO_KEY = "invalid or missing API key (Authorization: Bearer, x-api-key)"


async def _counted(pool: Pool, exclude: frozenset[str], body: dict[str, Any]) -> Response:
    """An Anthropic token count (serve/counting.py): a backend's, else rrcli's estimate."""
    counted = await count_tokens(pool, exclude, body)
    if counted is None:
        return _error(ANTHROPIC, 400, "messages: expected a list of message objects")
    tokens, by = counted
    headers = {"x-rrcli-estimate": "1"} if by is None else {"x-rrcli-deployment": by}
    return Response(orjson.dumps({"input_tokens": tokens}), media_type=_JSON, headers=headers)


async def _body(
    request: Request, heads: dict[str, str], limit: int
) -> dict[str, Any] | Response | None:
    """The JSON object of the body; None when it is over ``limit`` bytes, a 400 when it is not
    a JSON object."""
    length = heads.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        body = None
    return body if type(body) is dict else Response(status_code=400)


async def _plain(
    wire: Wire,
    pool: Pool,
    job: Job | InvalidJob,
    exclude: frozenset[str],
    request: Request,
    ended: Callable[[object], None] | None,
) -> Response:
    """``ended``: called when the call is over (its session's idle time starts then)."""
    try:
        outcome = await _called(pool, job, exclude, request, ended)
        if outcome is None:
            return Response(status_code=499)
        settled(outcome)
    except CallError as error:
        return _failed(wire, error, pool)
    return Json(orjson.dumps(wire.answer(outcome)), headers=_headers(outcome))


async def _called(
    pool: Pool,
    job: Job | InvalidJob,
    exclude: frozenset[str],
    request: Request,
    ended: Callable[[object], None] | None,
) -> CallOutcome | None:
    """The call, run in this request's own task and cancelled the moment the server says the
    client left (None then); where no server says so (in-process), in a task of its own that
    is watched."""
    gone = request.scope.get(ON_GONE)
    handler = asyncio.current_task()
    if gone is None or handler is None:
        task = asyncio.ensure_future(pool.submit(job, exclude))
        if ended is not None:
            task.add_done_callback(ended)
        return None if await _client_left(request, task) else task.result()
    over, left = False, False

    def leave() -> None:
        nonlocal left
        if not over:
            left = True
            handler.cancel(CLIENT_LEFT)

    gone.append(leave)
    try:
        return await pool.submit(job, exclude)
    except asyncio.CancelledError:
        if not left or handler.cancelling() > 1:
            raise  # the server itself stops this request
        handler.uncancel()
        return None
    finally:
        over = True
        if ended is not None:
            ended(None)


async def _streamed(
    wire: Wire,
    pool: Pool,
    job: Job,
    exclude: frozenset[str],
    request: Request,
    ended: Callable[[object], None] | None,
) -> Response:
    """The stream starts at the first text; until then the call may still fail with a status.
    Its ``model`` is the backend's, as a plain answer's is."""
    texts: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
    task = asyncio.ensure_future(pool.submit(job, exclude, lambda d, t: texts.put_nowait((d, t))))
    task.add_done_callback(lambda _: texts.put_nowait(None))
    if ended is not None:
        task.add_done_callback(ended)
    first = asyncio.ensure_future(texts.get())
    if await _client_left(request, first):
        task.cancel(CLIENT_LEFT)
        return Response(status_code=499)
    item = first.result()
    if item is None:
        try:
            outcome = settled(task.result())
        except CallError as error:
            return _failed(wire, error, pool)
        assert outcome.reply is not None and outcome.attempt is not None
        head = wire.stream_head(outcome.attempt.backend.model, job.params)
        end = wire.stream_end(head, outcome.reply, True)
        return Response(end, headers=_headers(outcome), media_type="text/event-stream")
    deployment, text = item
    head = wire.stream_head(_model_of(pool, deployment), job.params)
    events = _relay(wire, pool, head, text, texts, task)
    headers = {"x-rrcli-deployment": deployment, "cache-control": "no-cache"}
    return StreamingResponse(events, headers=headers, media_type="text/event-stream")


def _model_of(pool: Pool, deployment: str) -> str:
    """The model of the pool's backend ``deployment`` (its id, should the profile no longer
    have it)."""
    return next((b.model for b in pool.profile.backends if b.id == deployment), deployment)


async def _relay(
    wire: Wire,
    pool: Pool,
    head: dict[str, Any],
    text: str,
    texts: asyncio.Queue[tuple[str, str] | None],
    task: asyncio.Future[CallOutcome],
) -> AsyncIterator[bytes]:
    """Each piece of text as its event, then the end; the call cancelled if the client left."""
    try:
        yield wire.stream_text(head, text, True)
        while (item := await texts.get()) is not None:
            yield wire.stream_text(head, item[1], False)
        try:
            reply = settled(task.result()).reply
        except CallError as error:
            status, message, _ = told(error, _status(error), pool.engine.status())
            yield wire.stream_error(status, message)
            return
        assert reply is not None
        yield wire.stream_end(head, reply, False)
    finally:
        if not task.done():
            task.cancel(CLIENT_LEFT)


async def _client_left(request: Request, task: asyncio.Future[Any]) -> bool:
    """Wait for ``task``; True (the task cancelled) when the client disconnected first."""
    gone = request.scope.get(ON_GONE)
    if gone is None:  # no server tells of a lost connection: a task waits for the disconnect
        return await _watched(request, task)
    gone.append(lambda: task.cancel(CLIENT_LEFT))
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if not task.cancelled() or (current is not None and current.cancelling()):
            raise  # this request's own handler is cancelled (the server stops)
        return True
    except Exception:  # the caller reads the task's outcome
        pass
    return False


async def _watched(request: Request, task: asyncio.Future[Any]) -> bool:
    watcher = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task.done():
        return False
    task.cancel(CLIENT_LEFT)
    return True


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _headers(outcome: CallOutcome) -> dict[str, str]:
    attempt = outcome.attempt
    headers = {"x-rrcli-attempts": str(outcome.attempts)}
    if attempt is not None:
        headers["x-rrcli-deployment"] = attempt.backend.id
    reply = outcome.reply
    if reply is not None and reply.request_id:
        headers["x-request-id"] = reply.request_id
    return headers


def _status(error: CallError) -> int:
    """The status of a failed call: the request's fault 400, a spent budget 429, no backend
    503, the backend's 4xx as it said it, a timeout 504, any other upstream failure 502."""
    if error.type in ("invalid_job", "untranslatable"):
        return 400
    if error.type == "budget":
        return 429
    if error.type in ("no_healthy_backend", "no_backend"):
        return 503
    code = error.status_code
    if code is not None and 400 <= code < 500:
        return code
    return 504 if "timeout" in error.type else 502


def _failed(wire: Wire, error: CallError, pool: Pool) -> Response:
    """The answer to a failed call: upstream failures said as ``upstream.told`` says them; a
    call refused before any backend was asked (``refused``) is one the metrics count."""
    status, message, kind = told(error, _status(error), pool.engine.status())
    if error.type == "budget":  # the API's own words for an account out of money
        kind = "insufficient_quota"
    headers = {"x-rrcli-attempts": str(error.result.get("attempts", 0))}
    deployment = error.result.get("deployment")
    if deployment:
        headers["x-rrcli-deployment"] = str(deployment)
    if error.retry_after is not None:
        headers["retry-after"] = str(max(1, round(error.retry_after)))
    elif status in (429, 503) and kind != "insufficient_quota":
        headers["retry-after"] = "1"
    response = Json(wire.error(status, message, kind), status, headers)
    refused = _NOT_ASKED.get(error.type)
    if error.type == "no_healthy_backend" and not error.result.get("attempts"):
        refused = "no_healthy_backend"
    if refused is not None:
        response.refused = (refused, message)
    return response
