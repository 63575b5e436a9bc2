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
``size`` jobs and their blocks, whatever the number of jobs. A job's prompt is rendered once: the
window leaves it for the router's decision (``Prepared``), and cuts its blocks past the first
only when another job or a recent prompt starts with the same block.

When there is nothing to gain the window stands aside: once COLD decisions in a row found their
prompt's first block on no backend, it hands the jobs it holds out in order and then passes the
file's jobs through as they come, rendering nothing. The router still pictures the prompts it
reads (every one, and after a longer streak one in a few: ``CacheAware.reads``), so the first
that finds its first block warm again ends the streak and the window fills again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Protocol

from rrcli.records.jobs import InvalidJob, Job
from rrcli.routing.prompts import Prepared, Prompt, prompt_of, shared_blocks
from rrcli.routing.strategies import CacheAware
from rrcli.tokens import BLOCK_TOKENS

__all__ = ["Lookahead", "Warmth"]

_DEPTH = 512  # blocks of a prompt the window indexes at most (8,192 tokens)
COLD = CacheAware.COLD  # decisions in a row finding nothing warm after which it stands aside

# what the window holds of a job: the job, its first prompt (None: not indexed), its messages
_Entry = tuple[Job | InvalidJob, Prompt | None, list[Mapping[str, Any]]]
_ORDERED: list[Mapping[str, Any]] = []


class Pictured(Protocol):
    """What the router's strategy pictures (cache_aware): for every backend in profile order,
    the last prompts it was sent (newest last); the first blocks of all of those; and how many
    decisions in a row found their prompt's first block on no backend."""

    recents: Sequence[Sequence[Prompt]]
    recent_heads: Collection[int]
    cold: int


class Warmth(Protocol):
    """What the window asks of the router: the backends with a free slot now, its strategy's
    picture, and where to leave the prompt of a job it hands out, so its first call is not
    rendered again."""

    threshold: float
    prompts: Prepared

    def free_positions(self) -> Sequence[int]: ...
    @property
    def pictured(self) -> Pictured | None: ...


class Lookahead:
    """An iterator over ``jobs`` that reorders them within a window of ``size``; see the
    module docstring. ``session_binding``: named sessions keep their order."""

    def __init__(
        self, jobs: Iterator[Job | InvalidJob], warmth: Warmth, size: int, session_binding: bool
    ) -> None:
        pictured = warmth.pictured
        assert pictured is not None  # a window is made for a strategy that pictures the pool
        self._jobs = jobs
        self._warmth = warmth
        self._pictured = pictured
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
        window = self._window
        if self._pictured.cold >= COLD:  # nothing to gain lately: the file's order
            if not window:
                return next(self._jobs)  # its StopIteration ends this one
        else:
            self._fill()
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
            if entry[1] is not None:
                self._index.add(slot, entry[1])

    def _entry(self, job: Job | InvalidJob) -> _Entry:
        """The job with its first prompt and that prompt's messages; no prompt for a job whose
        order must stay, or whose prompt has no whole block."""
        if not isinstance(job, Job) or job.endpoint != "chat":
            return job, None, _ORDERED
        if self._sessions and job.session is not job.key:
            return job, None, _ORDERED
        messages: list[Mapping[str, Any]] = list(job.messages)  # as the call's are: a list
        if job.kind == "session" and job.turns:
            messages.append({"role": "user", "content": job.turns[0]})
        prompt = prompt_of(messages, job.params)
        return job, (prompt if prompt.head is not None else None), messages

    def _warm_slot(self, oldest: int) -> int:
        """The slot of the job that continues furthest one of the last prompts of a backend with
        a free slot (the oldest of those, over the threshold), else ``oldest``."""
        warmth, index, heads = self._warmth, self._index, self._index.heads
        # first the cheap test: does any job here share a first block with a recent prompt
        if heads.keys().isdisjoint(self._pictured.recent_heads):
            return oldest
        starts = [
            (position, prompt)
            for position, prompts in enumerate(self._pictured.recents)
            for prompt in prompts
            if prompt.head in heads
        ]
        free = set(warmth.free_positions())
        best_depth, best = 0, oldest
        for position, prompt in reversed(starts):
            if position in free:
                depth, slot = index.deepest(prompt.chain)
                if depth > best_depth:
                    best_depth, best = depth, slot
        if best == oldest:
            return oldest
        tokens = self._window[best][1].tokens  # type: ignore[union-attr]
        return best if best_depth * BLOCK_TOKENS >= warmth.threshold * tokens else oldest

    def _take(self, slot: int) -> Job | InvalidJob:
        job, prompt, messages = self._window.pop(slot)
        if prompt is not None:
            self._index.remove(slot, prompt)
            self._warmth.prompts.prepared(messages, job.params, prompt)  # type: ignore[union-attr]
        return job


class _Index:
    """The window's jobs by the first block of their first prompt, so a window of prompts that
    share nothing costs one entry a job and no hashing past the first block. A first block held
    by one job maps to (its slot, its prompt); one shared by several, to a map of every block of
    theirs to the slot holding it or the slots (oldest first) when several do, where the deepest
    match is a binary search."""

    def __init__(self) -> None:
        self.heads: dict[int, tuple[int, Prompt] | dict[int, Any]] = {}

    def add(self, slot: int, prompt: Prompt) -> None:
        heads, head = self.heads, prompt.head
        held = heads.get(head)  # type: ignore[arg-type]
        if held is None:
            heads[head] = (slot, prompt)  # type: ignore[index]
            return
        if type(held) is tuple:  # a second job starts alike: both indexed block by block
            group: dict[int, Any] = {}
            _index(group, held[0], held[1].chain)
            heads[head] = held = group  # type: ignore[index]
        _index(held, slot, prompt.chain)  # type: ignore[arg-type]

    def remove(self, slot: int, prompt: Prompt) -> None:
        heads, head = self.heads, prompt.head
        held = heads[head]  # type: ignore[index]
        if type(held) is tuple:
            del heads[head]  # type: ignore[arg-type]
            return
        for h in prompt.chain[:_DEPTH]:
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
            del heads[head]  # type: ignore[arg-type]

    def deepest(self, chain: Sequence[int]) -> tuple[int, int]:
        """How many leading blocks of ``chain`` a job here shares at most, and the oldest such
        job's slot; (0, -1) when none shares its first block."""
        held = self.heads.get(chain[0])
        if held is None:
            return 0, -1
        if type(held) is tuple:
            slot, other = held
            return shared_blocks(chain, other.chain, _DEPTH), slot
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
