"""The AWS event-stream framing (``application/vnd.amazon.eventstream``) that Bedrock's
ConverseStream answers in, read and written.

Each message is a prelude (total length and headers length, 4-byte big-endian each, and the
CRC32 of those 8 bytes), the headers (a 1-byte name length, the name, a 1-byte value type and
the value), the payload and the CRC32 of everything before it. Bedrock's headers are strings
(type 7: a 2-byte length, then UTF-8): ``:message-type`` (``event`` or ``exception``),
``:event-type`` / ``:exception-type`` and ``:content-type``; the payload is JSON.

Our own small codec rather than botocore's parser: the sim writes frames (botocore has no
writer) and the provider reads them with the same ~60 lines, each CRC checked; botocore's own
parser, which boto3 runs on the sim's frames, holds the two to the format. Pure: no I/O.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from rrcli.errors import InvalidResponseError
from rrcli.providers.base import invalid_response

__all__ = ["Frame", "FrameParser", "encode_frame"]

_PRELUDE = 12  # total length, headers length, prelude CRC
_STRING = 7  # the header value type of a UTF-8 string
#: a frame's longest: Bedrock's events are small; more is a broken or hostile stream
MAX_FRAME = 16 * 1024 * 1024
#: the byte length of each fixed-size header value type (0, 1: true and false, no value)
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}


def _broken(why: str) -> InvalidResponseError:
    """Bytes that are no event-stream frame: the answer is invalid (transient)."""
    return invalid_response(f"the event stream is broken: {why}")


@dataclass(frozen=True, slots=True)
class Frame:
    """One message: its string headers and its payload."""

    headers: dict[str, str]
    payload: bytes


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One message with ``headers`` (string values) and ``payload``."""
    head = b"".join(
        struct.pack("B", len(n := name.encode()))
        + n
        + struct.pack(">BH", _STRING, len(v := value.encode()))
        + v
        for name, value in headers.items()
    )
    total = _PRELUDE + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + head + payload
    return message + struct.pack(">I", zlib.crc32(message))


class FrameParser:
    """Frames from bytes as they arrive, in any pieces."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[Frame]:
        """The frames ``chunk`` completes (InvalidResponseError for bytes that are none). The
        frames read are cut from the buffer once, not one by one."""
        buffer = self._buffer
        buffer += chunk
        frames = []
        at = 0
        while len(buffer) - at >= _PRELUDE:
            total, head_length, crc = struct.unpack_from(">III", buffer, at)
            if zlib.crc32(buffer[at : at + 8]) != crc:
                raise _broken("the prelude's CRC does not match")
            if not _PRELUDE + head_length + 4 <= total <= MAX_FRAME:
                raise _broken(f"a frame of {total} bytes")
            if len(buffer) - at < total:
                break
            message = bytes(buffer[at : at + total])
            at += total
            if zlib.crc32(message[:-4]) != struct.unpack_from(">I", message, total - 4)[0]:
                raise _broken("the message's CRC does not match")
            headers = _headers(message[_PRELUDE : _PRELUDE + head_length])
            frames.append(Frame(headers, message[_PRELUDE + head_length : -4]))
        del buffer[:at]
        return frames

    def finish(self) -> list[Frame]:
        """The frames left at the end of the body: none (a cut frame is no event)."""
        return []


def _headers(data: bytes) -> dict[str, str]:
    """The headers block: string values kept, the other types' skipped."""
    out: dict[str, str] = {}
    at = 0
    try:
        while at < len(data):
            size = data[at]
            name = data[at + 1 : at + 1 + size].decode()
            at += 1 + size
            kind = data[at]
            at += 1
            if kind in (6, _STRING):  # bytes, string: a 2-byte length first
                (length,) = struct.unpack_from(">H", data, at)
                value = data[at + 2 : at + 2 + length]
                at += 2 + length
                if kind == _STRING:
                    out[name] = value.decode()
            elif kind in _FIXED:
                at += _FIXED[kind]
            else:
                raise _broken(f"header {name!r} has unknown value type {kind}")
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise _broken(f"unreadable headers ({exc})") from None
    return out
