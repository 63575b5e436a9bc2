"""``rrcli serve`` as a real process in front of sim servers, for the gateway's tests."""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runkit import popen


class Served:
    """A running ``rrcli serve``: ``url`` (``http://127.0.0.1:PORT``), ``stop()`` (SIGTERM)."""

    def __init__(
        self,
        profile: Path,
        cwd: Path,
        *args: str,
        env: dict[str, str] | None = None,
        preexec_fn: Callable[[], object] | None = None,
    ):
        self.proc = popen(
            "serve", "-p", profile, "--port", "0", *args, cwd=cwd, env=env, preexec_fn=preexec_fn
        )
        self.url = self._address()

    def _address(self) -> str:
        deadline = time.monotonic() + 30
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith("rrcli serve: "):
                    return line.split()[2]
            if self.proc.poll() is not None:
                raise RuntimeError(f"rrcli serve ended: {self.proc.stderr.read()}")
        raise RuntimeError("rrcli serve did not start")

    def stop(self) -> tuple[int, str]:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


def openai_backends(*urls: str, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"id": f"b{i}", "base_url": url, "endpoints": ["chat", "embeddings", "responses"], **extra}
        for i, url in enumerate(urls)
    ]
