"""What cache_aware pictures one backend holding warm: the prefix blocks of the prompts sent to it.

An LRU of block hashes bounded by the backend's ``prefix_cache_tokens``, as ``tokens.PrefixBlocks``
is for the simulated server's own cache, with one difference that makes a prompt sharing nothing
cheap: a prompt whose first block the picture does not hold is held by that block alone, the
entry standing for all its blocks (counted as them against the bound, evicted with them) and
keeping the prompt's text (a str, which the garbage collector never walks; a prompt known by its
blocks alone keeps them as a tuple). Its blocks are cut and held one by one only once another
prompt sent here starts with the same block; until then a match against it compares the two
prompts' chains. So a batch of prompts sharing nothing costs one entry a prompt and no hashing
past the first block.

A prompt's blocks are touched deepest first, so the blocks nearer the root are the more recent
and a prompt loses its tail before its head (as vLLM frees a request's blocks).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from rrcli.routing.prompts import Prompt, shared_blocks
from rrcli.tokens import BLOCK_TOKENS, CHARS_PER_TOKEN, prefix_blocks

__all__ = ["Lone", "Picture", "whole"]

Lone = str | tuple[int, ...]  # what an entry standing for a whole prompt keeps of it
_BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN


class Picture:
    """The prefix blocks one backend is taken to hold; see the module docstring."""

    __slots__ = ("_most", "blocks", "size")

    def __init__(self, capacity_tokens: int) -> None:
        #: block hash -> None (held alone) or what a first block standing for its prompt keeps
        #: of it (``Lone``), oldest first
        self.blocks: OrderedDict[int, Lone | None] = OrderedDict()
        self.size = 0  # blocks held, a prompt held by its first block counting all of its own
        self._most = max(0, capacity_tokens // BLOCK_TOKENS)

    def __len__(self) -> int:
        """Blocks held."""
        return self.size

    def __contains__(self, block: object) -> bool:
        """Whether the block of hash ``block`` is held as a first block or alone (a prompt held
        by its first block holds its other blocks too, but they are not asked for)."""
        return block in self.blocks

    def match(self, prompt: Prompt) -> int:
        """How many leading blocks of ``prompt`` are held."""
        blocks = self.blocks
        if prompt.head not in blocks:
            return 0
        lone = blocks[prompt.head]
        if lone is not None:
            return shared_blocks(prompt.chain, _chain(lone))
        n = 0
        for h in prompt.chain:
            if h not in blocks:
                break
            n += 1
        return n

    def add(self, prompt: Prompt) -> None:
        """A prompt just sent: held now, the least recent evicted past capacity."""
        blocks, head, most = self.blocks, prompt.head, self._most
        if head not in blocks and 0 < prompt.whole <= most:  # most prompts: one entry
            blocks[head] = prompt.text or tuple(prompt.chain)
            size = self.size + prompt.whole
        elif head is None or not most:
            return
        else:
            lone = blocks.get(head)
            if lone is not None:  # another prompt starts alike: both held block by block
                del blocks[head]
                self.size -= whole(lone)
                self._enter(_chain(lone))
            self._enter(prompt.chain)
            size = self.size
        while size > most:
            gone = blocks.popitem(False)[1]
            size -= 1 if gone is None else whole(gone)
        self.size = size

    def _enter(self, chain: Sequence[int]) -> None:
        blocks = self.blocks
        added = 0
        for h in reversed(chain[: self._most]):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
                added += 1
        self.size += added


def whole(lone: Lone) -> int:
    """The whole blocks of the prompt ``lone`` stands for."""
    return len(lone) // _BLOCK_CHARS if type(lone) is str else len(lone)


def _chain(lone: Lone) -> Sequence[int]:
    return prefix_blocks(lone) if type(lone) is str else lone
