"""Jobs files compressed with gzip or zstd, read as if they were plain JSON Lines.

A file is told by its first bytes, not its name: a ``jobs.jsonl.gz`` that is plain text is read
as text, and a gzip file named ``jobs.jsonl`` is decompressed. zstd needs the ``zstandard``
module; without it a zstd file is refused before any line is read, with the two ways on. A file
that ends early or is damaged stops the read with a UsageError naming the file, never a
traceback. Standard input and pipes are not sniffed (a peek there could wait for the writer);
``compressed_as`` names the format of a first line that is one, for ``iter_jobs``'s refusal.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from pathlib import Path
from typing import Any, BinaryIO

from rrcli.errors import UsageError

__all__ = ["compressed_as", "open_jobs_file"]

_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}


def compressed_as(head: bytes) -> str | None:
    """``gzip`` or ``zstd`` when ``head`` (a file's first bytes) starts as that format."""
    for magic, name in _MAGIC.items():
        if head.startswith(magic):
            return name
    return None


def open_jobs_file(path: Path) -> BinaryIO:
    """``path`` opened for ``iter_jobs``: decompressed when it is a gzip or zstd file.

    UsageError when it cannot be opened, or is zstd and ``zstandard`` is not installed."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned, or closed below
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the jobs file: {exc.strerror}") from exc
    try:
        if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
            return raw
        kind = compressed_as(raw.peek(4)[:4])
        if kind is None:
            return raw
        stream, errors = _decompressor(kind, raw, path)
        return _Decompressed(stream, raw, errors, path)  # type: ignore[return-value]
    except BaseException:
        raw.close()
        raise


def _decompressor(
    kind: str, raw: BinaryIO, path: Path
) -> tuple[BinaryIO, tuple[type[BaseException], ...]]:
    """The decompressing stream over ``raw`` and the errors that mean the file is damaged."""
    damaged: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb"), damaged  # type: ignore[return-value]
    try:
        import zstandard
    except ImportError:
        raise UsageError(
            f"{path}: this jobs file is zstd-compressed and the zstandard module is not "
            f"installed — pip install zstandard, or decompress it: zstd -d {path}"
        ) from None
    reader = _Zstd(raw, zstandard.ZstdDecompressor())
    return io.BufferedReader(reader), (*damaged, zstandard.ZstdError)  # type: ignore[return-value]


class _Zstd(io.RawIOBase):
    """The decompressed bytes of a zstd stream of one or more frames; EOFError when the stream
    ends inside a frame (zstandard's own reader ends there silently, losing the last lines)."""

    def __init__(self, raw: BinaryIO, decompressor: Any) -> None:
        self._raw = raw
        self._new = decompressor.decompressobj
        self._frame = self._new()
        self._started = False  # bytes of the current frame were read
        self._pending = b""  # decompressed, not yet handed out

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._raw.read(1 << 16)
            if not chunk:
                if self._started and not self._frame.eof:
                    raise EOFError("the last zstd frame is cut short")
                return 0
            self._pending = self._feed(chunk)
        n = min(len(self._pending), len(buffer))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _feed(self, chunk: bytes) -> bytes:
        out = b""
        while chunk:
            if self._frame.eof:
                self._frame = self._new()
            self._started = True
            out += self._frame.decompress(chunk)
            chunk = self._frame.unused_data if self._frame.eof else b""
        return out


class _Decompressed:
    """The decompressed lines of a file; its damage is a UsageError naming the file."""

    __slots__ = ("_damaged", "_path", "_raw", "_stream")

    def __init__(
        self,
        stream: BinaryIO,
        raw: BinaryIO,
        damaged: tuple[type[BaseException], ...],
        path: Path,
    ) -> None:
        self._stream = stream
        self._raw = raw
        self._damaged = damaged
        self._path = path

    def readline(self, size: int = -1) -> bytes:
        try:
            return self._stream.readline(size)
        except self._damaged as exc:
            raise self._error(exc) from exc

    def read(self, size: int = -1) -> bytes:
        try:
            return self._stream.read(size)
        except self._damaged as exc:
            raise self._error(exc) from exc

    def peek(self, size: int) -> bytes:
        try:
            return self._stream.peek(size)  # type: ignore[attr-defined]
        except self._damaged as exc:
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> UsageError:
        return UsageError(
            f"{self._path}: the compressed jobs file is damaged or ends early ({exc}) — "
            "test it (gzip -t or zstd -t) and write it again"
        )

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._raw.close()

    def __enter__(self) -> _Decompressed:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
