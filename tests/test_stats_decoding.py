"""The block decoder that learns a trace's names gives, block after block, the very records
the plain decoder gives, however the names change from block to block."""

from __future__ import annotations

import msgspec
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from stats_tracegen import run_records

from rrcli.stats.decoding import BlockDecoder, decode_line

NAMES = st.sampled_from(["a", "b", "é-🚀", "", "run-1", "x\\"])
_TEMPLATE = next(r for r in run_records("r", jobs=3, start_ms=0, seed=1) if r["event"] == "call")


@st.composite
def blocks(draw: st.DrawFn) -> list[bytes]:
    """Blocks of call lines naming a few runs, deployments, models, endpoints and error types,
    some with a line that does not decode or has a field of the wrong type."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        lines = []
        for _ in range(draw(st.integers(1, 5))):
            record = dict(_TEMPLATE)
            for field in ("run_id", "deployment", "model", "endpoint"):
                record[field] = draw(NAMES)
            record["error_type"] = draw(st.none() | NAMES)
            if draw(st.integers(0, 9)) == 0:
                record["deployment"] = draw(st.sampled_from([5, None, ["a"]]))
            lines.append(orjson.dumps(record))
        if draw(st.integers(0, 9)) == 0:
            lines.append(b'{"event": "call", "run_id": ')
        out.append(b"\n".join(lines) + b"\n")
    return out


def _plain(block: bytes) -> list[tuple] | None:
    try:
        return [msgspec.structs.astuple(decode_line(line)) for line in block.splitlines()]
    except msgspec.MsgspecError:
        return None


def _learning(decoder: BlockDecoder, block: bytes) -> list[tuple] | None:
    try:
        return [msgspec.structs.astuple(r) for r in decoder.decode_lines(block)]
    except msgspec.MsgspecError:
        return None


@settings(max_examples=300, deadline=None)
@given(blocks())
def test_every_block_decodes_to_what_the_plain_decoder_gives(stream):
    """Each block's records equal those of decoding its lines one at a time with the plain
    decoder, and a block that does not decode whole fails, as with the plain decoder."""
    decoder = BlockDecoder()
    for block in stream:
        assert _plain(block) == _learning(decoder, block)


def test_a_name_seen_before_comes_back_as_the_one_string_held():
    """Once a block has named a deployment, the next blocks' records hold that same string
    object (no new string a line, the point of learning), and a new name is still read."""
    decoder = BlockDecoder()
    line = orjson.dumps(dict(_TEMPLATE, deployment="gpu-7"))
    [first] = decoder.decode_lines(line)
    [again] = decoder.decode_lines(line)
    assert again.deployment is first.deployment
    [other] = decoder.decode_lines(orjson.dumps(dict(_TEMPLATE, deployment="gpu-8")))
    assert "gpu-8" == other.deployment
