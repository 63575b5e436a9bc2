"""CPU per job of rrcli for a plain text answer and for a tool-calls answer, plain and streamed.

    python benchmarks/bench_answers.py [--jobs 4000] [--repeat 3]

A canned OpenAI-compatible server runs in its own process (uvicorn + starlette, so its CPU is
not counted): a job with ``tools`` gets a realistic answer of two tool calls (usage details,
system fingerprint), any other a short text answer; ``stream`` gets the same as chunks (tool
arguments in fragments). rrcli runs the jobs in this process, 32 in flight, and the CPU time of
this process (``time.process_time``) per job is printed for each kind, the median of
``--repeat`` runs. Run it with ``PYTHONPATH`` pointing at two checkouts to compare versions: a
tools job must cost no more CPU than before within 10 %, a plain one no more at all.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
from _common import free_port, serving

from rrcli.config.profile import Backend, Profile
from rrcli.running.runner import RunOptions, run

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
CALLS = [
    {"id": "call_weather_0123456789", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}},
    {"id": "call_time_0123456789", "type": "function",
     "function": {"name": "get_time", "arguments": '{"tz": "Europe/Paris"}'}},
]  # fmt: skip
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 40,
    "total_tokens": 160,
    "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}
HEAD = {"id": "chatcmpl-bench", "created": 1_700_000_000, "model": "gpt-bench",
        "system_fingerprint": "fp_bench"}  # fmt: skip


def _body(message: dict, finish: str) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": None, "refusal": None,
              **message}, "logprobs": None, "finish_reason": finish}  # fmt: skip
    return orjson.dumps({**HEAD, "object": "chat.completion", "choices": [choice], "usage": USAGE})


def _stream(deltas: list[dict], finish: str) -> bytes:
    head = {**HEAD, "object": "chat.completion.chunk"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**head, "choices": [], "usage": USAGE})
    lines = [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks]
    return b"".join([*lines, b"data: [DONE]\n\n"])


def _tool_deltas() -> list[dict]:
    deltas: list[dict] = [{"role": "assistant", "content": None}]
    for i, call in enumerate(CALLS):
        function = call["function"]
        head = {"index": i, "id": call["id"], "type": "function",
                "function": {"name": function["name"], "arguments": ""}}  # fmt: skip
        deltas.append({"tool_calls": [head]})
        text = function["arguments"]
        for start in range(0, len(text), 6):
            piece = {"index": i, "function": {"arguments": text[start : start + 6]}}
            deltas.append({"tool_calls": [piece]})
    return deltas


TEXT = "The answer is forty-two, as everyone knows by now."
ANSWERS = {
    (False, False): _body({"content": TEXT}, "stop"),
    (True, False): _body({"tool_calls": CALLS}, "tool_calls"),
    (False, True): _stream([{"content": TEXT[i : i + 6]} for i in range(0, len(TEXT), 6)], "stop"),
    (True, True): _stream(_tool_deltas(), "tool_calls"),
}


def serve(port: int) -> None:
    """The canned server (``--serve PORT``)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def answer(request: Request) -> Response:
        body = orjson.loads(await request.body())
        stream = bool(body.get("stream"))
        kind = "text/event-stream" if stream else "application/json"
        return Response(ANSWERS[("tools" in body, stream)], media_type=kind)

    app = Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


def cpu_per_job(url: str, n: int, tools: bool, stream: bool) -> float:
    """CPU microseconds of this process per job, for ``n`` jobs of one kind."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        jobs = tmp / "jobs.jsonl"
        params = {"tools": TOOLS} if tools else {}
        with open(jobs, "wb") as f:
            for i in range(n):
                job = {"id": f"j{i}", "prompt": f"Weather {i}?", "params": params}
                f.write(orjson.dumps(job) + b"\n")
        backend = Backend(id="canned", provider="openai", base_url=url, model="gpt-bench",
                          max_concurrency=32, allow_private=True)  # fmt: skip
        profile = Profile(name="answers", concurrency=32, backends=(backend,))
        options = RunOptions(jobs=jobs, out=tmp / "r.jsonl", traces=tmp / "t.jsonl", stream=stream)
        start = time.process_time()
        summary = asyncio.run(run(profile, options, environ={}))
        cpu = time.process_time() - start
        assert summary.ok == n, summary.jobs
        return cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    os.environ.setdefault("NO_PROXY", "127.0.0.1")
    port = free_port()
    with serving([sys.executable, __file__, "--serve", str(port)], port) as url:
        for stream in (False, True):
            for tools in (False, True):
                runs = [cpu_per_job(url, args.jobs, tools, stream) for _ in range(args.repeat)]
                kind = f"{'tools' if tools else 'text'} {'streamed' if stream else 'plain'}"
                spread = ", ".join(f"{r:.0f}" for r in runs)
                print(f"{kind:>15}: {statistics.median(runs):6.0f} µs CPU a job ({spread})")


if __name__ == "__main__":
    main()
