"""The price of a backend (config/prices.py): its own, else genai-prices', else none."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rrcli.config.models import MEDIA, Media
from rrcli.config.prices import price_of
from rrcli.config.profile import Backend, Price
from rrcli.providers.base import Call
from rrcli.routing.costs import attempt_ceiling
from rrcli.tokens import UNCAPPED_OUTPUT, input_bound

pytest.importorskip("genai_prices")


def test_a_backends_own_price_wins():
    """A price in the profile is the price, whatever the library knows of the model."""
    backend = Backend("a", model="gpt-4o-mini", price=Price(1.0, 2.0))
    known = price_of(backend)
    assert known is not None
    assert (Price(1.0, 2.0), "profile") == (known.price, known.source)


def test_a_known_api_and_model_are_priced_by_genai_prices():
    """OpenAI's and Anthropic's own APIs, with models the library knows: their list prices."""
    openai = price_of(Backend("o", base_url="https://api.openai.com/v1", model="gpt-4o-mini"))
    anthropic = price_of(
        Backend("c", provider="anthropic", base_url="https://api.anthropic.com",
                model="claude-3-5-haiku-latest")
    )  # fmt: skip
    assert openai is not None and anthropic is not None
    assert ("genai-prices", "genai-prices") == (openai.source, anthropic.source)
    assert openai.price.input > 0 and openai.price.output > openai.price.input
    assert anthropic.price.output > anthropic.price.input > 0


def test_genai_prices_gives_the_cache_prices_where_the_provider_has_them():
    """Anthropic bills cache reads and writes (claude-sonnet-4-5: $0.30 and $3.75 a million
    against $3 for input); OpenAI bills cache reads only (gpt-4o: $1.25 against $2.50)."""
    claude = price_of(Backend("c", provider="anthropic", base_url="https://api.anthropic.com",
                              model="claude-sonnet-4-5"))  # fmt: skip
    gpt = price_of(Backend("o", base_url="https://api.openai.com/v1", model="gpt-4o"))
    assert claude is not None and gpt is not None
    assert Price(3.0, 15.0, 0.3, 3.75) == claude.price
    assert Price(2.5, 10.0, 1.25, None) == gpt.price


@pytest.mark.parametrize(
    "backend",
    [
        Backend("local", base_url="http://127.0.0.1:8000/v1", model="gpt-4o-mini"),
        Backend("unknown", base_url="https://api.openai.com/v1", model="no-such-model-x"),
        Backend("sim", provider="sim", base_url="sim://local", model="gpt-4o-mini"),
    ],
    ids=lambda b: b.id,
)
def test_a_server_or_model_the_library_does_not_know_has_no_price(backend):
    """A local server (whatever its model is called), an unknown model, the simulator: none."""
    assert None is price_of(backend)


def test_an_attempts_ceiling_is_its_input_at_a_token_a_character_and_its_output_cap():
    """Worst case: input at a token a character (plus framing per message) at the input price,
    plus the output cap (× n choices in any numeric spelling, × best_of; the default without a
    cap; none for embeddings) at the output price; an image at its most whatever its URL."""
    price = Price(1.0, 10.0)
    text = [{"role": "user", "content": "x" * 96}]  # 96 characters + 4 of framing
    assert (100 * 1.0 + 50 * 10.0) / 1e6 == attempt_ceiling(price, Call(text, {"max_tokens": 50}))
    for n in (3, 3.0, "3"):
        call = Call(text, {"max_tokens": 50, "n": n})
        assert (100 + 50 * 3 * 10.0) / 1e6 == attempt_ceiling(price, call)
    best = Call(text, {"max_tokens": 50, "n": 2, "best_of": 3}, endpoint="completions")
    assert (100 + 50 * 6 * 10.0) / 1e6 == attempt_ceiling(price, best)
    assert (100 + UNCAPPED_OUTPUT * 10.0) / 1e6 == attempt_ceiling(price, Call(text))
    assert 100 / 1e6 == attempt_ceiling(price, Call(text, endpoint="embeddings"))
    image = {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}
    shown = [{"role": "user", "content": [image]}]
    assert (1_604 + 10 * 10.0) / 1e6 == attempt_ceiling(price, Call(shown, {"max_tokens": 10}))


def test_files_and_audio_are_reserved_at_their_most_and_no_call_past_its_window():
    """A file part costs the file's most whatever its id; an audio part the less of its data's
    length and that; a call's whole input never more than the model's context window."""
    price = Price(1.0, 10.0)
    media = Media(image=1_000, file=50_000)
    part = {"type": "file", "file": {"file_id": "file-1"}}
    filed = [{"role": "user", "content": [part]}]
    assert (50_004 + 10 * 10.0) / 1e6 == attempt_ceiling(price, Call(filed, {"max_tokens": 10}),
                                                         media=media)  # fmt: skip
    clip = {"type": "input_audio", "input_audio": {"data": "A" * 800, "format": "wav"}}
    heard = [{"role": "user", "content": [clip]}]
    assert (807 + 10.0) / 1e6 == attempt_ceiling(price, Call(heard, {"max_tokens": 1}), media=media)
    long = [{"role": "user", "content": "x" * 90_000}]
    narrow = Media(image=1_000, file=50_000, window=64_000)
    assert (64_000 + 10.0) / 1e6 == attempt_ceiling(
        price, Call(long, {"max_tokens": 1}), media=narrow
    )


_text = st.text(max_size=30)
_message = st.fixed_dictionaries(
    {"content": st.one_of(_text, st.lists(st.fixed_dictionaries({"type": st.just("text"),
                                                                "text": _text})))},
    optional={"role": st.sampled_from(["user", "system"]), "name": _text},
)  # fmt: skip


@given(st.lists(_message, max_size=4))
def test_messages_are_bounded_alike_whatever_their_shape(messages):
    """A budget's input bound of chat messages is the same whether a message is a plain role
    and text (read directly) or has parts and other keys (walked): a token a UTF-8 byte of
    every text, the role aside."""
    texts = sum(len(str(m["content"]).encode()) for m in messages if isinstance(m["content"], str))
    parts = sum(len(p["text"].encode()) for m in messages if isinstance(m["content"], list)
                for p in m["content"])  # fmt: skip
    names = sum(len(m.get("name", "").encode()) for m in messages)
    expected = max(1, texts + parts + names + 4 * len(messages))
    assert expected == input_bound(messages, {}, None, MEDIA)
