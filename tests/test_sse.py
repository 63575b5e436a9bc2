"""The incremental SSE parser: events come out whole, however the bytes were split."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from rrcli.providers._sse import SSEEvent, SSEParser


def parse(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    return events + parser.finish()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(len(data), c) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


_field_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20
)
_event = st.tuples(st.sampled_from(["", "message_start", "content_block_delta"]), _field_text)
_newline = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[SSEEvent]]:
    """A byte stream of events with mixed line endings and comments, and the events it holds."""
    events = draw(st.lists(_event, max_size=6))
    out = b""
    expected = []
    for name, data in events:
        if draw(st.booleans()):
            out += b": keep-alive" + draw(_newline)
        if name:
            out += b"event: " + name.encode() + draw(_newline)
        newline = draw(_newline)  # "\r" then "\n" would be one CRLF, not a blank line
        out += b"data: " + data.encode() + newline + newline
        expected.append(SSEEvent(name or "message", data))
    return out, expected


@given(streams(), st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_split_of_a_stream_yields_the_same_events(
    stream: tuple[bytes, list[SSEEvent]], cuts: list[int]
) -> None:
    """Splitting a byte stream into chunks anywhere (inside a line, between CR and LF, inside a
    UTF-8 character) yields exactly the events of the whole stream."""
    data, expected = stream
    assert expected == parse([data])
    assert expected == parse(split_at(data, cuts))


@given(streams())
def test_byte_by_byte_feeding_yields_the_same_events(stream: tuple[bytes, list[SSEEvent]]) -> None:
    """Feeding one byte at a time is the worst split and still gives the same events."""
    data, expected = stream
    assert expected == parse([data[i : i + 1] for i in range(len(data))])


def test_multi_line_data_joins_with_newlines_and_comments_are_skipped() -> None:
    """Several ``data`` lines of one event join with ``\\n``; ``:`` lines never make events."""
    data = b": ping\r\ndata: one\r\ndata:two\r\n\r\n: another comment\n\n"
    assert [SSEEvent("message", "one\ntwo")] == parse([data])


def test_done_marker_and_openai_chunks() -> None:
    """OpenAI's stream ends with ``data: [DONE]``, an event like any other."""
    data = b'data: {"a":1}\n\ndata: [DONE]\n\n'
    assert [SSEEvent("message", '{"a":1}'), SSEEvent("message", "[DONE]")] == parse([data])


def test_an_event_without_its_final_blank_line_is_delivered_at_the_end() -> None:
    """A server that forgets the last blank line still has its last event read at the end."""
    assert [SSEEvent("message", "[DONE]")] == parse([b"data: [DONE]"])


def test_a_cut_inside_an_event_delivers_nothing_half_done() -> None:
    """Bytes of an event whose data has not arrived yet produce no event."""
    parser = SSEParser()
    assert [] == parser.feed(b"event: message_stop\nda")
