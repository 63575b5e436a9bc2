"""A call's prompt as cache_aware reads it, rendered once a job and hashed only as deep as needed.

A ``Prompt`` is a rendered prompt (``tokens.rendered_prompt``) with its tokens and the hash of
its first block (``head``); its chain of block hashes (``tokens.prefix_blocks``) is cut only when
a match needs it: a prompt whose first block no backend holds and no other job starts with is
never hashed further. Most of a cache-aware decision's cost was rendering and hashing, so a
batch's lookahead window, which renders every job's first prompt to index the job, leaves the
``Prompt`` in ``Prepared`` when it hands the job out, and the router's decision for that call
takes it (``of``) instead of rendering the prompt again. Entries are bounded (a job the response
cache answers never routes: its entry ages out), so memory does not grow with the number of jobs.
The ``prompt_cache_key`` a hosted backend is sent is made from the prompt's first tokens here too
(``CacheKeys``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from rrcli.tokens import BLOCK_TOKENS, CHARS_PER_TOKEN, prefix_blocks, rendered_prompt

__all__ = [
    "CacheKeys",
    "Prepared",
    "Prompt",
    "prompt_of",
    "rendered",
    "shared_blocks",
]

_KEY_CHARS = 256 * CHARS_PER_TOKEN  # a hosted API routes a prompt by its first 256 tokens
_BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN


class Prompt(msgspec.Struct, gc=False, eq=False):
    """A rendered prompt: ``text``, ``tokens``, ``whole`` (its whole blocks), ``head`` (its first
    block's hash; None when it has no whole block) and ``chain`` (every whole block's hash, block
    k's naming the first k + 1 blocks), cut on first use. Made by ``rendered`` (a Struct the
    garbage collector never tracks: it holds no container but its chain of ints)."""

    text: str
    tokens: int
    whole: int
    head: int | None
    _chain: Sequence[int] | None = None

    @classmethod
    def of_blocks(cls, chain: Sequence[int], tokens: int) -> Prompt:
        """A prompt known by its block hashes alone (no text)."""
        return cls("", tokens, len(chain), chain[0] if chain else None, chain)

    @property
    def chain(self) -> Sequence[int]:
        chain = self._chain
        if chain is None:
            chain = self._chain = prefix_blocks(self.text)
        return chain


def rendered(text: str) -> Prompt:
    """The prompt of ``text``, a prompt as ``tokens.rendered_prompt`` renders it."""
    n = len(text)
    whole = n // _BLOCK_CHARS
    # prefix_blocks' first hash, without cutting the rest
    return Prompt(text, n // CHARS_PER_TOKEN, whole, hash(text[:_BLOCK_CHARS]) if whole else None)


def prompt_of(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> Prompt:
    """The prompt of a call of ``messages`` with ``params`` (its tools, an Anthropic system)."""
    return rendered(rendered_prompt(messages, params.get("tools"), params.get("system")))


def shared_blocks(chain: Sequence[int], other: Sequence[int], most: int | None = None) -> int:
    """How many leading blocks ``chain`` and ``other`` share, ``most`` at most (block k's hash
    names the first k + 1 blocks: equality is monotone, so a binary search)."""
    low, high = 0, min(len(chain), len(other))
    if most is not None:
        high = min(high, most)
    while low < high:
        mid = (low + high + 1) // 2
        if chain[mid - 1] == other[mid - 1]:
            low = mid
        else:
            high = mid - 1
    return low


def _cache_key_head(text: str) -> str:
    """Stable text naming the first tokens of the rendered prompt ``text``, that a hosted API
    routes it by (the same in every process, unlike the blocks' hashes)."""
    return hashlib.blake2b(text[:_KEY_CHARS].encode(), digest_size=8).hexdigest()


class CacheKeys:
    """The ``prompt_cache_key`` cache_aware gives a call to a backend that sets keys: one key a
    prefix, a second one only past KEY_RATE calls a minute on the first, and so on (a hosted
    API sends one key's overflow to other machines, which hold no cache)."""

    KEY_RATE = 15  # calls a minute one prompt_cache_key takes before the next key is used
    KEYS = 4096  # prefixes whose calls of the last minute are remembered

    def __init__(self) -> None:
        self._times: dict[tuple[int, str], deque[float]] = {}  # the least recent first

    def key(self, position: int, text: str, now: float) -> str:
        """The key of a call of the rendered prompt ``text`` to the backend at ``position``, at
        ``now`` (seconds)."""
        head = _cache_key_head(text)
        keys = self._times
        times = keys.pop((position, head), None) or deque()
        keys[(position, head)] = times
        while times and times[0] <= now - 60.0:
            times.popleft()
        spread = len(times) // self.KEY_RATE
        times.append(now)
        while len(keys) > self.KEYS:
            del keys[next(iter(keys))]
        return f"rrcli-{head}" if not spread else f"rrcli-{head}-{spread}"


# what Prepared holds of a call: its params, its messages, its prompt
_Ready = tuple[Mapping[str, Any], Sequence[Mapping[str, Any]], Prompt]


class Prepared:
    """The prompts already rendered whose call has not routed yet; see the module docstring.

    Keyed by the identity of the job's ``params`` (a dict of its own: the entry holds it, so no
    other object takes its id meanwhile); a call takes an entry only when its params are that
    dict and its messages a list equal to the one rendered (list equality takes the same dicts
    as equal before comparing them: a session's first turn is a new dict each time)."""

    MOST = 4096  # prompts kept: far more than are handed out and not yet routed

    def __init__(self) -> None:
        self._ready: OrderedDict[int, _Ready] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        return len(self._ready)

    def prepared(
        self, messages: list[Mapping[str, Any]], params: Mapping[str, Any], prompt: Prompt
    ) -> None:
        """A call of ``messages`` with ``params`` has the prompt ``prompt``."""
        ready = self._ready
        ready[id(params)] = (params, messages, prompt)
        if len(ready) > self.MOST:
            ready.popitem(last=False)

    def of(self, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any] | None) -> Prompt:
        """The prompt of a call of ``messages`` with ``params``: the prepared one (then
        forgotten: a job's first call routes once), else rendered now."""
        if self._ready:
            found = self._ready.pop(id(params), None)
            if found is not None and found[0] is params and found[1] == messages:
                return found[2]
        if not params:  # most calls set none
            return rendered(rendered_prompt(messages))
        return prompt_of(messages, params)
