"""What `run --otlp` costs: the same run without it, with a collector that takes every batch,
and with no collector at all, on one `rrcli sim` server, in the same run.

    python benchmarks/bench_otlp.py [--jobs 5000] [--concurrency 64] [--latency-ms 50]

The collector is a plain HTTP server in its own process that answers every POST with 200
(the cost measured is rrcli's: making, encoding and sending the spans, not a collector's). The
dead collector is a closed port. Each line prints jobs/s, the ratio to the run without --otlp,
and the spans sent and dropped that the run logged.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from _common import free_port, serving, sim_server, two_backend_pool, write_jobs
from structlog.testing import capture_logs

from rrcli.running.runner import RunOptions, run

SINK = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def one(base_url: str, jobs: Path, tmp: Path, concurrency: int, otlp: str | None) -> str:
    profile = two_backend_pool(base_url, concurrency)
    options = RunOptions(
        jobs=jobs, out=tmp / "r.jsonl", traces=tmp / "t.jsonl", overwrite=True, otlp=otlp
    )
    with capture_logs() as logs:
        t0 = time.perf_counter()
        summary = asyncio.run(run(profile, options, environ={}))
        elapsed = time.perf_counter() - t0
    assert summary.ok == summary.total, summary.jobs
    sent = [e for e in logs if e["event"] in ("rrcli.otlp_sent", "rrcli.otlp_dropped")]
    counts = f"sent {sent[0]['sent']}, dropped {sent[0].get('dropped', 0)}" if sent else ""
    return f"{summary.ok / elapsed:8.0f} jobs/s {counts}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=50)
    args = parser.parse_args()
    port = free_port()
    with (
        tempfile.TemporaryDirectory() as d,
        sim_server("--latency-ms", str(args.latency_ms)) as url,
    ):
        tmp = Path(d)
        jobs = write_jobs(tmp / "jobs.jsonl", args.jobs)
        with serving([sys.executable, "-c", SINK, str(port)], port):
            sink = f"http://127.0.0.1:{port}"
            one(url, jobs, tmp, args.concurrency, None)  # warm up
            print(f"{args.jobs} jobs, {args.concurrency} in flight, server {args.latency_ms} ms")
            for name, otlp in (
                ("without --otlp", None),
                ("--otlp, collector", sink),
                ("--otlp, no collector", f"http://127.0.0.1:{free_port()}"),
            ):
                print(f"  {name:<22} {one(url, jobs, tmp, args.concurrency, otlp)}", flush=True)


if __name__ == "__main__":
    main()
