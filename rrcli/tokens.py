"""The one token estimate: what a request may cost before its reply says what it did cost.

rpm/tpm reservations, ``--dry-run`` and the simulated backend's usage all count this way: about
four characters a token (as rough tokenizers count) plus a few tokens of framing per message; a
non-text content (parts, images) counts as its JSON text. A non-chat job's ``input`` (texts to
embed or moderate, a prompt to complete, Responses items) counts the same way, a token array as
its length. No tokenizer: a reservation is corrected by the reply's usage, and a plan is an
estimate.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson

__all__ = [
    "BLOCK_TOKENS",
    "CAP_WORDS",
    "MAX_USAGE_TOKENS",
    "UNCAPPED_OUTPUT",
    "MediaTokens",
    "PrefixBlocks",
    "cap_fault",
    "cap_word",
    "estimate_call_tokens",
    "estimate_input_tokens",
    "estimate_prompt_tokens",
    "estimate_value_tokens",
    "input_bound",
    "input_token_bound",
    "one_cap",
    "output_cap",
    "plausible_call_tokens",
    "prefix_blocks",
    "rendered_prompt",
    "rendered_with_reply",
    "whole_tokens",
]

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4  # role and framing around each message
MAX_USAGE_TOKENS = 1 << 32  # a usage count this large is no call's: the reply's count is unknown
REPLY_ALLOWANCE = 16_384  # tokens: an output without a cap, images priced beyond their JSON text
UNCAPPED_OUTPUT = REPLY_ALLOWANCE  # the output a call without a cap is taken to reach at most


def estimate_input_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Input tokens of ``messages``: at least 1."""
    chars = 0
    for message in messages:
        content = message.get("content")
        if type(content) is str:
            chars += len(content)
        elif content is not None:
            chars += len(orjson.dumps(content, default=str))
    return chars // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE * len(messages) or 1


def estimate_value_tokens(value: object) -> int:
    """Input tokens of a non-chat job's ``input``: at least 1."""
    tokens, chars = _count(value)
    return tokens + chars // CHARS_PER_TOKEN or 1


def _count(value: object) -> tuple[int, int]:
    """(tokens, characters) of an input: a text its characters, a token array its tokens, a
    list the sum of its items, a message-like item its text and framing, anything else its
    JSON text."""
    if type(value) is str:
        return 0, len(value)
    if type(value) is list:
        if value and all(type(v) is int for v in value):
            return len(value), 0
        tokens = chars = 0
        for item in value:
            t, c = _count(item)
            tokens, chars = tokens + t, chars + c
        return tokens, chars
    if type(value) is dict and type(value.get("content")) is str:
        return TOKENS_PER_MESSAGE, len(value["content"])
    return 0, len(orjson.dumps(value, default=str))


def estimate_prompt_tokens(messages: Sequence[Mapping[str, Any]], value: object = None) -> int:
    """Input tokens of a call: its ``messages``, or a non-chat job's input ``value`` when given."""
    return estimate_input_tokens(messages) if value is None else estimate_value_tokens(value)


def estimate_call_tokens(
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    value: object = None,
    prompt: int | None = None,
) -> int:
    """Tokens a call may cost: its input (``prompt`` when already estimated, else
    ``estimate_prompt_tokens``) and its output cap (``max_tokens``, ``max_completion_tokens`` or
    the Responses API's ``max_output_tokens``; 0 when none is set)."""
    given = estimate_prompt_tokens(messages, value) if prompt is None else prompt
    return given + (output_cap(params) or 0)


#: the request parameters that cap a call's output, in every API rrcli speaks
CAP_WORDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_MOST_TOKENS = 1 << 62  # a cap no API takes, still sendable as a 64-bit integer


def whole_tokens(value: object) -> int | None:
    """``value`` as a count of tokens: a whole number, 0 or more (an integer, or a float
    without a fraction as JSON may write one); None for anything else."""
    if type(value) is int:
        return value if 0 <= value < _MOST_TOKENS else None
    if type(value) is float and value.is_integer() and 0 <= value < _MOST_TOKENS:
        return int(value)
    return None


def output_cap(params: Mapping[str, Any]) -> int | None:
    """The output cap a request sets: the LARGEST of its spellings (``max_tokens``,
    ``max_completion_tokens``, the Responses API's ``max_output_tokens``), since a backend may
    read any of them (SGLang and others read ``max_completion_tokens`` first); None when none
    is set to a whole number above 0 (a backend may read 0 as no cap)."""
    return _largest(params) or None


def _largest(params: Mapping[str, Any]) -> int | None:
    """The largest whole number of tokens any spelling of the cap sets (0 included)."""
    if not params:  # most calls set no params at all
        return None
    most = None
    for word in CAP_WORDS:
        value = params.get(word)
        if value is not None:
            cap = whole_tokens(value)
            if cap is not None and (most is None or cap > most):
                most = cap
    return most


#: the spellings of the output cap each API takes, by (dialect, endpoint)
_API_CAP_WORDS = {
    ("openai", "chat"): ("max_tokens", "max_completion_tokens"),
    ("openai", "completions"): ("max_tokens",),
    ("openai", "responses"): ("max_output_tokens",),
    ("anthropic", "chat"): ("max_tokens",),
}


def cap_word(params: Mapping[str, Any], endpoint: str, dialect: str, fallback: str) -> str:
    """The one spelling a call's output cap is sent in: the call's own when it sets only one
    and its API (``dialect``, ``endpoint``) takes it, else ``fallback`` (the backend's)."""
    said = [word for word in CAP_WORDS if params.get(word) is not None]
    if len(said) == 1 and said[0] in _API_CAP_WORDS.get((dialect, endpoint), ()):
        return said[0]
    return fallback


def one_cap(params: dict[str, Any], word: str, default: int | None = None) -> None:
    """Leave in ``params`` one spelling of the output cap, ``word``, every other removed: at
    ``output_cap`` (the largest any spelling set), else at ``default`` (a budget's), else at
    the 0 the request set. So the body a backend gets carries the cap a budget reserved
    (``output_cap`` of the params left), and no other it might read instead. Params with no
    whole cap and no ``default`` (nothing reserved) are left as they are."""
    said = _largest(params)
    if said is None and default is None:
        return
    for spelling in CAP_WORDS:
        params.pop(spelling, None)
    cap = said if said or default is None else default
    if cap is not None:
        params[word] = cap


def cap_fault(params: Mapping[str, Any]) -> str | None:
    """What is wrong with a request's output cap: the first spelling whose value is no whole
    number of tokens (``whole_tokens``), as ``max_tokens must be ...``; None when each is
    one (or null)."""
    for word in CAP_WORDS:
        value = params.get(word)
        if value is not None and whole_tokens(value) is None:
            shown = orjson.dumps(value, default=str).decode()
            shown = shown if len(shown) <= 40 else shown[:40] + "..."
            return f"{word} must be a whole number of tokens (0 or more), got {shown}"
    return None


def input_token_bound(estimate: int) -> int:
    """The most input tokens a text estimated at ``estimate`` tokens can be: one a character
    (the estimate counts four)."""
    return CHARS_PER_TOKEN * estimate


#: content parts billed by what they show, not by their text: an image at the provider's most
MEDIA_PARTS = frozenset({"image_url", "image", "input_image"})
#: parts billed by what they hold: a file (a PDF's pages as text and images), an audio clip
FILE_PARTS = frozenset({"file", "input_file", "document"})
AUDIO_PARTS = frozenset({"input_audio", "audio"})


class MediaTokens(Protocol):
    """The most input tokens a part billed by what it holds can cost: ``image`` an image,
    ``file`` a file or an audio clip; ``window``: the most input one call can have (the
    model's context window, which no provider bills past: it refuses such a request), None
    when unknown. ``config.models.Media`` is one."""

    @property
    def image(self) -> int: ...
    @property
    def file(self) -> int: ...
    @property
    def window(self) -> int | None: ...


#: request parameters the provider reads as input: tool definitions and output schemas
_INPUT_PARAMS = ("tools", "functions", "response_format", "text", "tool_choice")
_NOT_TEXT = frozenset({"role", "type"})


def input_bound(
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    value: object,
    media: MediaTokens,
) -> int:
    """The most input tokens a call can be billed: one a UTF-8 byte of its text (no tokenizer
    makes more), an image part ``media.image`` tokens whatever its URL's length, a file part
    ``media.file`` (its bytes do not bound a compressed PDF's text), an audio part the less of
    its text (audio data is billed at fewer tokens than its base64 has characters) and
    ``media.file``, a token array its length, framing per message, and its tool definitions
    (and output schema) as JSON text; never more than ``media.window``."""
    total = _messages_bound(messages, media) if value is None else _bound(value, media)
    total += TOKENS_PER_MESSAGE * len(messages)
    for name in _INPUT_PARAMS:
        if name in params:
            total += len(orjson.dumps(params[name], default=str))
    window = media.window
    return max(1, total if window is None or total < window else window)


def _messages_bound(messages: Sequence[Mapping[str, Any]], media: MediaTokens) -> int:
    """``_bound`` of ``messages``, a message of a role and a text read without the walk (a
    budget bounds every attempt)."""
    total = 0
    for message in messages:
        content = message.get("content")
        if type(content) is str and len(message) == 2 and "role" in message:
            total += len(content) if content.isascii() else len(content.encode())
        else:
            total += _bound(message, media)
    return total


def _bound(value: object, media: MediaTokens) -> int:
    if type(value) is str:
        return len(value) if value.isascii() else len(value.encode())
    if type(value) is list:
        if value and all(type(v) is int for v in value):
            return len(value)
        return sum(_bound(item, media) for item in value)
    if type(value) is dict:
        kind = value.get("type")
        if kind in MEDIA_PARTS:
            return media.image
        if kind in FILE_PARTS:
            return media.file
        text = sum(_bound(v, media) for k, v in value.items() if k not in _NOT_TEXT)
        return min(text, media.file) if kind in AUDIO_PARTS else text
    if value is None or type(value) is bool:
        return 0
    return len(orjson.dumps(value, default=str))


def plausible_call_tokens(estimate: int, tpm: int | None = None) -> int:
    """The most a call estimated at ``estimate`` tokens (``estimate_call_tokens``) can have cost,
    whatever its reply claims: one token per character of its messages (the estimate counts
    four), its output cap, and REPLY_ALLOWANCE; never more than the backend's whole ``tpm``
    (a provider enforcing that limit serves no larger request), never less than the estimate."""
    most = CHARS_PER_TOKEN * estimate + REPLY_ALLOWANCE
    if tpm is not None:
        most = min(most, tpm)
    return max(estimate, most)


# -- prefix blocks: what a server's prefix cache can reuse -------------------------------------

BLOCK_TOKENS = 16  # a KV-cache block (vLLM's default block size)
_BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN


def rendered_prompt(
    messages: Sequence[Mapping[str, Any]], tools: object = None, system: object = None
) -> str:
    """The whole prompt as a server renders it, in order: the system text (an Anthropic
    ``system``, else the leading system messages), the tools, then every other message, each
    with its role. Two prompts share a prefix here exactly where a server's would."""
    if len(messages) == 1 and not (tools or system):  # one user text: the common job, no loop
        message = messages[0]
        content = message.get("content")
        if type(content) is str and message.get("role") == "user" and "tool_calls" not in message:
            return "user\x1f" + content
    parts: list[str] = []
    if system:
        parts.append("system\x1f" + _text(system))
    start = 0
    while start < len(messages) and messages[start].get("role") in ("system", "developer"):
        parts.append("system\x1f" + _text(messages[start].get("content")))
        start += 1
    if tools:
        parts.append("tools\x1f" + orjson.dumps(tools, default=str).decode())
    for message in messages[start:]:
        parts.append(f"{message.get('role')}\x1f{_text(message.get('content'))}")
        if "tool_calls" in message:
            parts.append(orjson.dumps(message["tool_calls"], default=str).decode())
    return "\x1e".join(parts)


def rendered_with_reply(prompt: str, reply: str) -> str:
    """``prompt`` (``rendered_prompt``'s) followed by the assistant's text reply to it, as the
    next turn's prompt renders that history: what a server's cache holds after answering."""
    head = prompt + "\x1e" if prompt else ""
    return f"{head}assistant\x1f{reply}"


def _text(content: object) -> str:
    return content if type(content) is str else orjson.dumps(content, default=str).decode()


_WHOLE = 8  # leading blocks hashed as whole prefixes: C-fast for a short prompt's few blocks
_PREFIXES = [slice(0, (k + 1) * _BLOCK_CHARS) for k in range(_WHOLE)]


def prefix_blocks(prompt: str) -> list[int]:
    """The chained hashes of the prompt's whole blocks of BLOCK_TOKENS tokens: block k's hash
    names the first k + 1 blocks, as a server's prefix cache keys them (a partial last block is
    never cached). Hashes are this process's own. The first _WHOLE are the hashes of the
    prefixes themselves (no Python step a block), each later one the hash of the one before
    and its own block's text."""
    whole = len(prompt) // _BLOCK_CHARS
    chain = list(map(hash, map(prompt.__getitem__, _PREFIXES[:whole])))
    if whole > _WHOLE:
        h = chain[-1]
        for i in range(_WHOLE * _BLOCK_CHARS, whole * _BLOCK_CHARS, _BLOCK_CHARS):
            h = hash((h, prompt[i : i + _BLOCK_CHARS]))
            chain.append(h)
    return chain


class PrefixBlocks:
    """The prefix blocks one server holds: an LRU of block hashes bounded by ``capacity``
    tokens. Used both for the simulated server's cache and for rrcli's picture of a real one.

    A prompt's blocks are touched deepest first, so the blocks nearer the root are the more
    recent and a prompt loses its tail before its head (as vLLM frees a request's blocks)."""

    __slots__ = ("_most", "blocks")

    def __init__(self, capacity_tokens: int) -> None:
        #: the held blocks' hashes, the least recent first (read it, never change it)
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self._most = max(0, capacity_tokens // BLOCK_TOKENS)

    def __len__(self) -> int:
        """Blocks held."""
        return len(self.blocks)

    def __contains__(self, block: object) -> bool:
        """Whether the block of hash ``block`` is held."""
        return block in self.blocks

    def match(self, chain: Sequence[int]) -> int:
        """How many leading blocks of ``chain`` are held."""
        blocks = self.blocks
        n = 0
        for h in chain:
            if h not in blocks:
                break
            n += 1
        return n

    def add(self, chain: Sequence[int]) -> None:
        """The blocks of a prompt just sent: held now, the least recent evicted past capacity."""
        blocks, most = self.blocks, self._most
        if not most:
            return
        for h in reversed(chain[:most]):
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > most:
            blocks.popitem(last=False)
