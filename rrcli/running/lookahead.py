"""A window over the jobs to come, so a backend with a free slot takes the job it holds warm.

An online router sees one request at a time; a batch can look ahead. With ``strategy =
"cache_aware"`` the workers pull from a ``Lookahead`` over the selected jobs: it holds up to
``size`` of them, indexed by their first prompt's prefix blocks, and hands out the job whose
prompt best continues one of the last prompts a backend with room was sent, so jobs that share a
prefix run back to back where it is warm. With no such job it hands out the oldest, as the file
orders them.

What does not change: every job is handed out exactly once (one result line each; a job never
handed out has none, so ``--resume`` runs it); jobs the window does not index keep their order
among themselves (a named session's jobs under ``binding = "session"``, every endpoint but chat,
invalid lines); no job waits more than ``size`` hand-outs past its turn. Memory is the window's:
``size`` jobs and their blocks, whatever the number of jobs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Protocol

from rrcli.records.jobs import InvalidJob, Job
from rrcli.routing.prompts import PromptBlocks, blocks_of
from rrcli.tokens import BLOCK_TOKENS, rendered_prompt

__all__ = ["Lookahead", "Warmth"]

_DEPTH = 512  # blocks of a prompt the window indexes at most (8,192 tokens)

# what the window holds of a job: the job, its first prompt's blocks, tokens and hash
_Entry = tuple[Job | InvalidJob, Sequence[int], int, int]


class Warmth(Protocol):
    """What the window asks of the router: the backends with a free slot now; for every
    backend in profile order, the prefix blocks of the last prompts it was sent (newest last), and
    the first blocks of all of those;
    and where to leave the blocks of a job it hands out, so its first call is not hashed again."""

    threshold: float
    prompts: PromptBlocks

    def free_positions(self) -> Sequence[int]: ...
    def recents(self) -> Sequence[Sequence[Sequence[int]]]: ...
    def recent_heads(self) -> Collection[int]: ...


class Lookahead:
    """An iterator over ``jobs`` that reorders them within a window of ``size``; see the
    module docstring. ``session_binding``: named sessions keep their order."""

    def __init__(
        self, jobs: Iterator[Job | InvalidJob], warmth: Warmth, size: int, session_binding: bool
    ) -> None:
        self._jobs = jobs
        self._warmth = warmth
        self._size = max(1, size)
        self._sessions = session_binding
        self._window: OrderedDict[int, _Entry] = OrderedDict()  # slot -> entry, the file's order
        self._index = _Index()
        self._next_slot = 0
        self._handed = 0  # jobs handed out so far
        self._ended = False

    def __iter__(self) -> Lookahead:
        return self

    def __next__(self) -> Job | InvalidJob:
        self._fill()
        window = self._window
        if not window:
            raise StopIteration
        oldest = next(iter(window))
        slot = oldest
        if self._index.heads and oldest + self._size > self._handed:
            slot = self._warm_slot(oldest)
        self._handed += 1
        return self._take(slot)

    def _fill(self) -> None:
        window = self._window
        while not self._ended and len(window) < self._size:
            job = next(self._jobs, None)
            if job is None:
                self._ended = True
                return
            entry = self._entry(job)
            slot = self._next_slot
            self._next_slot += 1
            window[slot] = entry
            if entry[1]:
                self._index.add(slot, entry[1])

    def _entry(self, job: Job | InvalidJob) -> _Entry:
        """The job with its first prompt's blocks, tokens and hash; none for a job whose order
        must stay."""
        if not isinstance(job, Job) or job.endpoint != "chat":
            return job, (), 0, 0
        if self._sessions and job.session is not job.key:
            return job, (), 0, 0
        messages: Sequence[Mapping[str, Any]] = job.messages
        if job.kind == "session" and job.turns:
            messages = [*messages, {"role": "user", "content": job.turns[0]}]
        prompt = rendered_prompt(messages, job.params.get("tools"), job.params.get("system"))
        chain, tokens = blocks_of(prompt)
        return job, chain, tokens, hash(prompt)

    def _warm_slot(self, oldest: int) -> int:
        """The slot of the job that continues furthest one of the last prompts of a backend with
        a free slot (the oldest of those, over the threshold), else ``oldest``."""
        warmth, index, heads = self._warmth, self._index, self._index.heads
        # first the cheap test: does any job here share a first block with a recent prompt
        if heads.keys().isdisjoint(warmth.recent_heads()):
            return oldest
        starts = [
            (position, chain)
            for position, chains in enumerate(warmth.recents())
            for chain in chains
            if chain[0] in heads
        ]
        free = set(warmth.free_positions())
        best_depth, best = 0, oldest
        for position, chain in reversed(starts):
            if position in free:
                depth, slot = index.deepest(chain)
                if depth > best_depth:
                    best_depth, best = depth, slot
        if best == oldest:
            return oldest
        tokens = self._window[best][2]
        return best if best_depth * BLOCK_TOKENS >= warmth.threshold * tokens else oldest

    def _take(self, slot: int) -> Job | InvalidJob:
        job, chain, tokens, key = self._window.pop(slot)
        if chain:
            self._index.remove(slot, chain)
            self._warmth.prompts.prepared(key, (chain, tokens))
        return job


class _Index:
    """The window's jobs by the first block of their first prompt, so a window of prompts that
    share nothing costs one entry a job. A first block held by one job maps to (its slot, its
    blocks); one shared by several, to a map of every block of theirs to the slot holding it or
    the slots (oldest first) when several do, where the deepest match is a binary search."""

    def __init__(self) -> None:
        self.heads: dict[int, tuple[int, Sequence[int]] | dict[int, Any]] = {}

    def add(self, slot: int, chain: Sequence[int]) -> None:
        heads, head = self.heads, chain[0]
        held = heads.get(head)
        if held is None:
            heads[head] = (slot, chain)
            return
        if type(held) is tuple:
            group: dict[int, Any] = {}
            _index(group, *held)
            heads[head] = held = group
        _index(held, slot, chain)  # type: ignore[arg-type]

    def remove(self, slot: int, chain: Sequence[int]) -> None:
        heads, head = self.heads, chain[0]
        held = heads[head]
        if type(held) is tuple:
            del heads[head]
            return
        for h in chain[:_DEPTH]:
            slots = held.get(h)  # type: ignore[union-attr]
            if type(slots) is int:
                if slots == slot:
                    del held[h]  # type: ignore[attr-defined]
            elif slots is not None:
                slots.pop(slot, None)
                if len(slots) == 1:
                    held[h] = next(iter(slots))  # type: ignore[index]
                elif not slots:
                    del held[h]  # type: ignore[attr-defined]
        if not held:
            del heads[head]

    def deepest(self, chain: Sequence[int]) -> tuple[int, int]:
        """How many leading blocks of ``chain`` a job here shares at most, and the oldest such
        job's slot; (0, -1) when none shares its first block."""
        held = self.heads.get(chain[0])
        if held is None:
            return 0, -1
        if type(held) is tuple:
            slot, other = held
            return _depth_with(chain, other), slot
        depth = _depth_in(chain, held)  # type: ignore[arg-type]
        slots = held[chain[depth - 1]]  # type: ignore[index]
        return depth, slots if type(slots) is int else next(iter(slots))


def _index(blocks: dict[int, Any], slot: int, chain: Sequence[int]) -> None:
    """Every block of ``chain`` (down to _DEPTH) held by ``slot`` too."""
    for h in chain[:_DEPTH]:
        held = blocks.get(h)
        if held is None:
            blocks[h] = slot
        elif type(held) is int:
            if held != slot:  # a block twice in one prompt is held once
                blocks[h] = {held: None, slot: None}
        else:
            held[slot] = None


def _depth_in(chain: Sequence[int], blocks: dict[int, Any]) -> int:
    """How many leading blocks of ``chain`` some job of ``blocks`` shares (a job holding block
    k holds every block before it, so presence is monotone: a binary search)."""
    low, high = 0, min(len(chain), _DEPTH)
    while low < high:
        mid = (low + high + 1) // 2
        if chain[mid - 1] in blocks:
            low = mid
        else:
            high = mid - 1
    return low


def _depth_with(chain: Sequence[int], other: Sequence[int]) -> int:
    """How many leading blocks ``chain`` and ``other`` share (block k's hash names the first
    k + 1 blocks: equality is monotone too)."""
    low, high = 0, min(len(chain), len(other), _DEPTH)
    while low < high:
        mid = (low + high + 1) // 2
        if chain[mid - 1] == other[mid - 1]:
            low = mid
        else:
            high = mid - 1
    return low
