"""An incremental Server-Sent Events parser: bytes in as they arrive, whole events out.

Both streaming providers read ``text/event-stream`` bodies whose reads split anywhere: inside a
line, between a CR and its LF, inside a multi-byte UTF-8 character. The parser keeps the partial
line between feeds and follows the WHATWG rules that matter here: lines end at CRLF, LF or CR;
a blank line dispatches the event; ``:`` lines are comments (keep-alives); ``data`` lines of one
event join with newlines; ``event`` names the event; other fields are ignored. Lines are split on
bytes before decoding, which is safe because CR and LF never occur inside a UTF-8 sequence.

Memory: a line that never ends is kept as its pieces and joined once, when it ends (so reading it
costs linear time); the caller bounds the bytes fed in all (``max_response_bytes``), and with them
every line and event the parser holds.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its ``event`` name ("message" when none was given) and its data."""

    event: str
    data: str


class SSEParser:
    """Feed it byte chunks; it returns the events each chunk completed."""

    __slots__ = ("_buffer", "_data", "_event", "_has_data", "_pieces", "_skip_lf")

    def __init__(self) -> None:
        self._buffer = b""  # the partial line after the last line end
        self._pieces: list[bytes] = []  # chunks since then that had no line end: joined once
        self._skip_lf = False  # the last chunk ended with CR: a leading LF belongs to it
        self._event = ""
        self._data: list[str] = []
        self._has_data = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk`` (possibly none), in order."""
        events: list[SSEEvent] = []
        if not chunk:
            return events
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        if b"\n" not in chunk and b"\r" not in chunk:  # inside a long line: keep the piece
            self._pieces.append(chunk)
            return events
        if self._pieces:
            self._pieces.append(chunk)
            chunk = b"".join(self._pieces)
            self._pieces.clear()
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:  # CRLF and CR endings become LF; a final CR may have its LF next
            self._skip_lf = buffer[-1:] == b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buffer.split(b"\n")
        self._buffer = lines.pop()  # the partial line after the last LF ("" when none)
        data = self._data  # emptied in place at each event's end, so this alias stays valid
        for raw in lines:
            if raw[:6] == b"data: ":  # the common line, inline
                data.append(raw[6:].decode("utf-8", errors="replace"))
                self._has_data = True
            else:
                self._line(raw, events)
        return events

    def finish(self) -> list[SSEEvent]:
        """At the end of the body: the last event, if the server did not end it with a blank line.

        (The standard drops such an event; accepting it is kinder to servers that forget the
        final blank line, and a truly cut stream is still caught by its missing end marker.)
        """
        events: list[SSEEvent] = []
        if self._pieces:
            self._buffer += b"".join(self._pieces)
            self._pieces.clear()
        if self._buffer:
            self._line(self._buffer, events)
            self._buffer = b""
        self._line(b"", events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            if self._has_data:
                events.append(SSEEvent(self._event or "message", "\n".join(self._data)))
            self._event = ""
            self._data.clear()
            self._has_data = False
            return
        line = raw.decode("utf-8", errors="replace")
        if line[0] == ":":
            return
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
