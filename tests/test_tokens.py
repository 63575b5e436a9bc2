"""The one token estimate (rrcli/tokens.py): what reservations, --dry-run and the sim count."""

from __future__ import annotations

from rrcli.tokens import estimate_call_tokens, estimate_input_tokens


def test_four_characters_a_token_plus_four_a_message():
    """Text counts a token per four characters, each message four tokens of framing."""
    messages = [{"role": "system", "content": "be concise"}, {"role": "user", "content": "x" * 22}]
    assert 32 // 4 + 2 * 4 == estimate_input_tokens(messages)


def test_parts_count_as_their_json_and_nothing_counts_as_one():
    """Content that is not text counts as its JSON text; a missing content adds nothing; an
    estimate is never below one token."""
    parts = [{"type": "text", "text": "hi"}]
    assert len('[{"type":"text","text":"hi"}]') // 4 + 4 == estimate_input_tokens(
        [{"role": "user", "content": parts}]
    )
    assert 4 == estimate_input_tokens([{"role": "assistant", "content": None}])
    assert 1 == estimate_input_tokens([])


def test_a_call_adds_its_output_cap():
    """A call may cost its input and its output cap: max_tokens, else max_completion_tokens."""
    messages = [{"role": "user", "content": "abcd"}]
    assert (5, 55, 35, 5) == (
        estimate_call_tokens(messages, {}),
        estimate_call_tokens(messages, {"max_tokens": 50}),
        estimate_call_tokens(messages, {"max_completion_tokens": 30}),
        estimate_call_tokens(messages, {"max_tokens": "many"}),
    )
