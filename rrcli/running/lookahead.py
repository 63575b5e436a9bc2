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
from collections.abc import Iterator, Sequence
from typing import Protocol

from rrcli.records.jobs import InvalidJob, Job
from rrcli.tokens import BLOCK_TOKENS, CHARS_PER_TOKEN, prefix_blocks, rendered_prompt

__all__ = ["Lookahead", "Warmth"]

_DEPTH = 512  # blocks of a prompt the window indexes at most (8,192 tokens)


class Warmth(Protocol):
    """What the window asks of the router: the backends with a free slot now, and, for every
    backend in profile order, the prefix blocks of the last prompts it was sent (newest last)."""

    threshold: float

    def free_positions(self) -> Sequence[int]: ...
    def recents(self) -> Sequence[Sequence[Sequence[int]]]: ...


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
        # slot -> (job, its prefix blocks, its tokens); insertion order is the file's
        self._window: OrderedDict[int, tuple[Job | InvalidJob, list[int], int]] = OrderedDict()
        self._by_block: dict[int, dict[int, None]] = {}  # block hash -> slots (oldest first)
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
        if self._by_block and oldest + self._size > self._handed:
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
            chain, tokens = self._blocks(job)
            slot = self._next_slot
            self._next_slot += 1
            window[slot] = (job, chain, tokens)
            for h in chain:
                self._by_block.setdefault(h, {})[slot] = None

    def _blocks(self, job: Job | InvalidJob) -> tuple[list[int], int]:
        """The prefix blocks of the job's first prompt and its tokens; none for a job whose
        order must stay."""
        if not isinstance(job, Job) or job.endpoint != "chat":
            return [], 0
        if self._sessions and job.session is not job.key:
            return [], 0
        messages = list(job.messages)
        if job.kind == "session" and job.turns:
            messages.append({"role": "user", "content": job.turns[0]})
        prompt = rendered_prompt(messages, job.params.get("tools"), job.params.get("system"))
        return prefix_blocks(prompt)[:_DEPTH], len(prompt) // CHARS_PER_TOKEN

    def _warm_slot(self, oldest: int) -> int:
        """The slot of the job that continues furthest one of the last prompts of a backend with
        a free slot (the oldest of those, over the threshold), else ``oldest``."""
        warmth, by_block = self._warmth, self._by_block
        # first the cheap test: does any job here share a first block with a recent prompt
        starts = [
            (position, chain)
            for position, chains in enumerate(warmth.recents())
            for chain in chains
            if chain[0] in by_block
        ]
        if not starts:
            return oldest
        free = set(warmth.free_positions())
        best_depth, best = 0, oldest
        for position, chain in reversed(starts):
            if position in free and (depth := _shared_depth(chain, by_block)) > best_depth:
                best_depth, best = depth, next(iter(by_block[chain[depth - 1]]))
        if best == oldest:
            return oldest
        _, _, tokens = self._window[best]
        return best if best_depth * BLOCK_TOKENS >= warmth.threshold * tokens else oldest

    def _take(self, slot: int) -> Job | InvalidJob:
        job, chain, _ = self._window.pop(slot)
        by_block = self._by_block
        for h in chain:
            slots = by_block[h]
            del slots[slot]
            if not slots:
                del by_block[h]
        return job


def _shared_depth(chain: Sequence[int], by_block: dict[int, dict[int, None]]) -> int:
    """How many leading blocks of ``chain`` some job in the window shares (a job holding block
    k holds every block before it, so presence is monotone: a binary search)."""
    low, high = 0, min(len(chain), _DEPTH)
    while low < high:
        mid = (low + high + 1) // 2
        if chain[mid - 1] in by_block:
            low = mid
        else:
            high = mid - 1
    return low
