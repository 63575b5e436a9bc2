"""Helpers for end-to-end tests of ``rrcli run``: profiles on disk, the CLI as a real process."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import tomli_w

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (a server there: connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_profile(path: Path, backends: list[dict[str, Any]], **top: Any) -> Path:
    """A profile file whose backends default to a keyless local server (auth none, private ok)."""
    full = []
    for b in backends:
        entry = {"provider": "openai", "model": "sim", "allow_private": True, **b}
        if "credentials" not in entry and entry["provider"] != "sim":
            entry["auth"] = "none"
        full.append(entry)
    retry = {"backoff_initial": 0.01, "backoff_max": 0.05, **top.pop("retry", {})}
    path.write_bytes(tomli_w.dumps({**top, "retry": retry, "backends": full}).encode())
    return path


def write_jobs(path: Path, n: int, *, prefix: str = "j") -> Path:
    with open(path, "wb") as f:
        for i in range(n):
            f.write(orjson.dumps({"id": f"{prefix}{i}", "prompt": f"question {i}"}) + b"\n")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def calls(traces: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(traces) if r["event"] == "call"]


def run_on_replicas(
    tmp_path: Path, servers: list[Any], strategy: str, jobs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Run ``jobs`` on sims keeping a 4,000-token prefix cache (backends r0, r1, ...) with
    ``strategy`` and 2 in flight; the result lines (the run must succeed)."""
    backends = [
        {"id": f"r{i}", "base_url": s.openai_url, "prefix_cache_tokens": 4000}
        for i, s in enumerate(servers)
    ]
    profile = write_profile(
        tmp_path / f"{strategy}.toml", backends, strategy=strategy, concurrency=2
    )
    path = tmp_path / f"{strategy}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(job) + b"\n" for job in jobs))
    done = rrcli("run", path, "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    return read_jsonl(tmp_path / f"{strategy}.results.jsonl")


def rrcli(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    memory: int | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real command in its own process (no TTY: plain log lines on stderr); ``memory``:
    its address space limit in bytes (RLIMIT_AS), past which an allocation is a MemoryError;
    ``stdin``: what its standard input (a pipe) holds, else it inherits ours."""

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [sys.executable, "-m", "rrcli", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit_memory if memory is not None else None,
        input=stdin,
    )


def popen(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.Popen:
    """The CLI as a process; ``preexec_fn`` runs in it before rrcli starts (to set a limit)."""
    return subprocess.Popen(
        [sys.executable, "-m", "rrcli", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )


class Terminal:
    """The CLI as a real process on a pseudo-terminal (so it shows its live display), its
    output gathered by a thread: ``wait_for(text)`` waits until the screen has shown it."""

    def __init__(self, *args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> None:
        import pty
        import threading

        leader, follower = pty.openpty()
        screen = {"PYTHONPATH": str(ROOT), "COLUMNS": "200", "LINES": "50", "NO_COLOR": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rrcli", *map(str, args)],
            cwd=cwd,
            env={**os.environ, **screen, **(env or {})},
            stdin=follower,
            stdout=follower,
            stderr=follower,
        )
        os.close(follower)
        self._leader = leader
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._leader, 4096)
            except OSError:  # the terminal closed with the process
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def wait_for(self, text: str, timeout: float = 30.0) -> bool:
        import time

        deadline = time.monotonic() + timeout
        while text not in self.text:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                return text in self.text
            time.sleep(0.02)
        return True

    def finish(self, timeout: float = 60.0) -> int:
        """Wait for the process to exit; its exit status."""
        code = self.proc.wait(timeout=timeout)
        self._reader.join(5.0)
        os.close(self._leader)
        return code
