"""A call's prompt as cache_aware reads it: its prefix blocks and its tokens, hashed once a job.

Cutting a rendered prompt into chained block hashes (``tokens.prefix_blocks``) is most of what a
cache-aware decision costs, and a batch's lookahead window already does it for every job's first
prompt to index the job. So when the window hands a job out it leaves the blocks here
(``prepared``), and the router's decision for that prompt takes them (``of``) instead of
hashing the prompt again. Entries are keyed by the rendered prompt's own ``hash``; they are
bounded (a job the response cache answers never routes: its entry ages out), so memory does not
grow with the number of jobs.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

from rrcli.tokens import CHARS_PER_TOKEN, prefix_blocks

__all__ = ["Prompt", "PromptBlocks", "blocks_of", "cache_key_head"]

Prompt = tuple[Sequence[int], int]  # a prompt's prefix blocks and its tokens
_KEY_CHARS = 256 * CHARS_PER_TOKEN  # a hosted API routes a prompt by its first 256 tokens


def blocks_of(text: str) -> Prompt:
    """The prefix blocks and the tokens of the rendered prompt ``text``."""
    return prefix_blocks(text), len(text) // CHARS_PER_TOKEN


def cache_key_head(text: str) -> str:
    """Stable text naming the first tokens of the rendered prompt ``text``, that a hosted API
    routes it by (the same in every process, unlike the blocks' hashes)."""
    return hashlib.blake2b(text[:_KEY_CHARS].encode(), digest_size=8).hexdigest()


class PromptBlocks:
    """The blocks of prompts already hashed whose call has not routed yet; see the module
    docstring."""

    MOST = 4096  # prompts kept: far more than are handed out and not yet routed

    def __init__(self) -> None:
        self._ready: OrderedDict[int, Prompt] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        return len(self._ready)

    def prepared(self, key: int, prompt: Prompt) -> None:
        """The prompt whose rendered text hashes to ``key`` has these blocks and tokens."""
        ready = self._ready
        ready[key] = prompt
        if len(ready) > self.MOST:
            ready.popitem(last=False)

    def of(self, text: str) -> Prompt:
        """The blocks and tokens of the rendered prompt ``text``: the prepared ones (then
        forgotten: a job's first call routes once), else hashed now."""
        found = self._ready.pop(hash(text), None)
        return found if found is not None else blocks_of(text)
