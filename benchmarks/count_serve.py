"""Instructions a request through `rrcli serve` and the bare forwarder, counted by callgrind.

Two `rrcli sim` backends (50 ms); the gateway runs under ``valgrind --tool=callgrind`` with
counting off; ``--warm`` requests warm it up, then counting is switched on for ``--requests``
requests (64 in flight, the raw load generator) and off again. Instructions do not move with
the machine's load, so this is the figure to compare across checkouts (``--root``: another
checkout's serve and forwarder).

    python benchmarks/count_serve.py [--requests 300] [--warm 200] [--root CHECKOUT]
        [--what serve,forwarder] [--keep FOLDER]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _common import ROOT, free_port, sim_server
from _rawload import raw_load
from bench_serve import BODY, profile


def _argv(what: str, root: Path, urls: list[str], port: int, tmp: Path) -> list[str]:
    if what == "serve":
        path = profile(urls, tmp / "pool.toml")
        return ["-m", "rrcli", "serve", "-p", str(path), "--port", str(port), "--no-auth"]
    return [str(root / "benchmarks" / "_forwarder.py"), str(port), *urls]


def count(
    what: str, root: Path, urls: list[str], requests: int, warm: int, keep: Path | None = None
) -> float:
    """Instructions a request of gateway ``what`` of the checkout at ``root``; the profile
    copied to ``keep`` (for callgrind_annotate) when given."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        port = free_port()
        valgrind = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        ]  # fmt: skip
        argv = [*valgrind, sys.executable, *_argv(what, root, urls, port, Path(tmp))]
        with _started(argv, port, root) as (url, pid):
            asyncio.run(raw_load([url], BODY, warm, 64))
            _control("-i", "on", pid)
            asyncio.run(raw_load([url], BODY, requests, 64))
            _control("-i", "off", pid)
            _control("-d", pid)
        dumped = [p for p in Path(tmp).glob("callgrind.out*") if p != out]
        text = dumped[0].read_text(errors="replace") if dumped else ""
        if keep is not None and dumped:
            (keep / f"callgrind.{what}").write_text(text)
        totals = re.findall(r"^(?:summary|totals):\s*(\d+)", text, re.M)
        if not totals:
            raise RuntimeError(f"no callgrind totals in {tmp}")
        return int(totals[-1]) / requests


@contextlib.contextmanager
def _started(argv: list[str], port: int, root: Path) -> Iterator[tuple[str, int]]:
    """``argv`` run in checkout ``root`` until it listens on ``port`` (valgrind starts a
    Python program some fifty times slower); its base URL and pid; stopped after."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                    break
                time.sleep(0.5)
            else:
                log.seek(0)
                raise RuntimeError(f"{argv[3:6]} did not start: {log.read()[-2000:]!r}")
            yield f"http://127.0.0.1:{port}/v1", proc.pid
        finally:
            proc.terminate()
            proc.wait(120)


def _control(*args: object) -> None:
    subprocess.run(["callgrind_control", *map(str, args)], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--what", default="serve,forwarder")
    parser.add_argument("--keep", type=Path, help="a folder to keep the profiles in")
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    with sim_server("--latency-ms", "50") as a, sim_server("--latency-ms", "50") as b:
        for what in args.what.split(","):
            per = count(what, args.root.resolve(), [a, b], args.requests, args.warm, args.keep)
            print(f"{what} ({args.root}): {per:,.0f} instructions a request")


if __name__ == "__main__":
    main()
