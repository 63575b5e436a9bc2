"""The floor of serve's stack: a bare forwarder (starlette on uvicorn with httptools and uvloop,
one httpx2 client per upstream on rrcli's transport, each request passed on as it came
to the next upstream in turn, no routing, gates, records or translation). bench_serve.py runs
it in its own process beside `rrcli serve`.

    python benchmarks/_forwarder.py PORT UPSTREAM_URL [UPSTREAM_URL ...]
"""

from __future__ import annotations

import itertools
import sys

import httpx2
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from rrcli.providers._lean import lean_transport
from rrcli.providers.peer import guard_connections


def build_app(upstreams: list[str]) -> Starlette:
    limits = httpx2.Limits(max_connections=256, max_keepalive_connections=256)
    clients = [
        httpx2.AsyncClient(base_url=u, timeout=60, transport=lean_transport(limits))
        for u in upstreams
    ]
    for client in clients:  # the cheap idle check of rrcli's clients
        guard_connections(client, allow_private=True)
    turn = itertools.cycle(clients)
    headers = {"content-type": "application/json"}

    async def forward(request: Request) -> Response:
        body = await request.body()
        client = next(turn)
        sent = client.build_request("POST", "/chat/completions", content=body, headers=headers)
        if orjson.loads(body).get("stream") is not True:
            reply = await client.send(sent)
            return Response(reply.content, reply.status_code, media_type="application/json")
        reply = await client.send(sent, stream=True)
        return StreamingResponse(
            reply.aiter_raw(), reply.status_code, media_type="text/event-stream",
            background=BackgroundTask(reply.aclose),
        )  # fmt: skip

    return Starlette(routes=[Route("/v1/chat/completions", forward, methods=["POST"])])


if __name__ == "__main__":
    port, upstreams = int(sys.argv[1]), sys.argv[2:]
    app = build_app(upstreams)
    uvicorn.run(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
        http="httptools", loop="uvloop",
    )  # fmt: skip
