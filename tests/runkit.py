"""Helpers for end-to-end tests of ``rrcli run``: profiles on disk, the CLI as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import tomli_w

ROOT = Path(__file__).resolve().parent.parent


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


def rrcli(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the real command in its own process (no TTY: plain log lines on stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "rrcli", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def popen(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rrcli", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
