"""The ways to pick a backend for one routing decision.

Strategies are pure choice: they see a snapshot of the eligible backends (``Candidate``) and
return which one to use; they take no slot, wait for nothing and hold no I/O. The router filters
the candidates (failover exclusions, cooldowns), takes the gate and does any waiting. Each keeps
only its own small decision state (a rotation counter, smooth-weighted-round-robin weights); the
rng is passed in, so a seed makes every choice repeatable.

``first_available`` is the one strategy that ranks instead of picking: ``order`` gives the
shuffled order in which the router tries the gates without queuing. ``cache_aware`` is the one
that reads the prompt: the router hands it the call's ``Prompt`` (``choose_for``) and tells it
where each prompt went (``sent``), so it keeps its picture of what each backend holds warm.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from operator import contains
from typing import ClassVar, Protocol

import msgspec

from rrcli.config.profile import Backend, Profile
from rrcli.routing.picture import Picture
from rrcli.routing.prompts import CacheKeys, Prompt
from rrcli.tokens import BLOCK_TOKENS

__all__ = [
    "CacheAware",
    "Candidate",
    "Fastest",
    "FirstAvailable",
    "LeastLoaded",
    "Random",
    "RoundRobin",
    "Strategy",
    "Weighted",
    "make_strategy",
]


class Candidate(msgspec.Struct, frozen=True):
    """One eligible backend as a strategy sees it (a load-aware strategy's router makes one per
    backend a decision: a frozen Struct, which builds many times faster than a frozen dataclass).

    ``position``: index in profile order. ``in_flight``/``waiting``/``cap``: its gate's calls in
    flight, requests queued, effective cap. ``ewma_latency_ms``: None until a call succeeded.
    """

    position: int
    weight: float = 1.0
    in_flight: int = 0
    waiting: int = 0
    cap: int = 1
    ewma_latency_ms: float | None = None

    @property
    def load(self) -> float:
        """Occupancy of the gate: (in flight + queued) / effective cap."""
        return (self.in_flight + self.waiting) / self.cap


class Strategy(Protocol):
    name: ClassVar[str]
    #: load-aware strategies skip cooling backends always; the others only with
    #: ``cooldown.round_robin``
    load_aware: ClassVar[bool]

    def admits(self, backend: Backend) -> bool:
        """Whether the backend can ever be chosen (weighted: weight 0 never is)."""
        ...

    def choose(self, candidates: Sequence[Candidate]) -> int:
        """The index, in ``candidates`` (non-empty, in profile order), of the chosen backend."""
        ...


class _Base:
    load_aware: ClassVar[bool] = False

    def admits(self, backend: Backend) -> bool:
        return True


class RoundRobin(_Base):
    """Decision k goes to backend (k // rotate_every) mod n, n the size of the whole pool; when
    that one is not a candidate (excluded, cooling), the next candidate after it in profile
    order."""

    name = "round_robin"

    def __init__(self, n: int, rotate_every: int = 1) -> None:
        self._n = max(1, n)
        self._every = max(1, rotate_every)
        self._k = 0

    def choose(self, candidates: Sequence[Candidate]) -> int:
        target = (self._k // self._every) % self._n
        self._k += 1
        return _first_at_or_after(candidates, target)


class Random(_Base):
    """Uniform over the candidates."""

    name = "random"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(self, candidates: Sequence[Candidate]) -> int:
        return self._rng.randrange(len(candidates))


class Weighted(_Base):
    """Smooth weighted round robin (nginx): each decision adds every candidate's weight to its
    current weight, picks the highest (the first on a tie) and takes the total off it. Over each
    cycle of sum(weights) decisions every backend gets exactly its share, interleaved."""

    name = "weighted"

    def __init__(self) -> None:
        self._current: dict[int, float] = {}

    def admits(self, backend: Backend) -> bool:
        return backend.weight > 0

    def choose(self, candidates: Sequence[Candidate]) -> int:
        total = 0.0
        best = 0
        for i, c in enumerate(candidates):
            total += c.weight
            self._current[c.position] = self._current.get(c.position, 0.0) + c.weight
            if self._current[c.position] > self._current[candidates[best].position]:
                best = i
        self._current[candidates[best].position] -= total
        return best


class _Rotating(_Base):
    """Picks the candidate with the smallest key; ties go to the first at or after a rotating
    pointer, so equal backends take turns (never always the first)."""

    load_aware = True

    def __init__(self) -> None:
        self._next = 0

    def _key(self, c: Candidate) -> tuple[float, ...]:
        raise NotImplementedError

    def choose(self, candidates: Sequence[Candidate]) -> int:
        return self._lowest(candidates, [self._key(c) for c in candidates])

    def _lowest(self, candidates: Sequence[Candidate], keys: Sequence[tuple[float, ...]]) -> int:
        """The index of the candidate with the lowest key, ties rotating."""
        low = min(keys)
        tied = [c for c, k in zip(candidates, keys, strict=True) if k == low]
        chosen = tied[_first_at_or_after(tied, self._next)]
        self._next = chosen.position + 1
        return candidates.index(chosen)


class LeastLoaded(_Rotating):
    """Lowest (in flight + queued) / effective cap."""

    name = "least_loaded"

    def _key(self, c: Candidate) -> tuple[float, ...]:
        return (c.load,)


class Fastest(_Rotating):
    """Shortest expected delay: (in flight + queued + 1) / effective cap × EWMA latency; a
    backend with no sample yet comes first.

    A backend with a free slot comes before any where the call would queue. Without that rule a
    pool run at the sum of its caps keeps queuing at the fast backends while slots of the slow
    ones stay idle: at 50/100/200 ms the expected delays balance with ~6 calls queued at the
    fastest, and the makespan ends ~16 % over the ideal (see benchmarks/bench_scheduling.py).
    Queued calls hold workers, so an idle slot is throughput lost; among free slots, and when
    every gate is full, the expected delay decides as before."""

    name = "fastest"

    def _key(self, c: Candidate) -> tuple[float, ...]:
        full = 1.0 if c.in_flight + c.waiting >= c.cap else 0.0
        if c.ewma_latency_ms is None:
            return (full, 0.0, c.load)
        return (full, 1.0, (c.in_flight + c.waiting + 1) / c.cap * c.ewma_latency_ms)


class CacheAware(_Rotating):
    """Each call where its prompt's prefix is most likely warm, unless that unbalances the pool.

    What each backend holds is pictured as the prefix blocks of the prompts sent to it
    (``Picture``, LRU-bounded by its ``prefix_cache_tokens``). A decision, among the
    backends with a free slot (all of them when none has one):
    - the pool is unbalanced (the busiest backend's calls exceed the idlest's by more than
      ``balance_abs`` and by a factor over ``balance_rel``): the least loaded;
    - else the longest match, when it covers at least ``threshold`` of the prompt (ties: the
      least loaded);
    - else the least loaded, ties to the backend holding the fewest blocks: with no shared
      prefix it is least_loaded, its ties spreading the cache's use.
    ``balance_abs`` None is a quarter of the smallest cap (64 of a 256-slot replica).

    When there is nothing to gain it reads few prompts: once IDLE decisions in a row found their
    prompt's first block on no backend, only every SAMPLE-th call's prompt is read (``reads``),
    the others chosen as with no match (``choose``) and not pictured, until a prompt read finds
    its first block warm. A prefix shared by many jobs is read again within a few SAMPLEs of
    calls; what is lost is a rare pair of prompts (one in 2,048 decisions or fewer finding
    anything warm). A pool with a backend that sets prompt_cache_key reads every prompt.
    """

    name = "cache_aware"
    RECENT = 4  # prompts remembered per backend for the lookahead (recents)
    COLD = 256  # decisions in a row finding nothing warm after which the lookahead stands aside
    IDLE = 2048  # ... after which only every SAMPLE-th call's prompt is read (reads)
    SAMPLE = 8

    def __init__(
        self,
        capacities: Sequence[int],
        threshold: float = 0.3,
        balance_abs: int | None = None,
        balance_rel: float = 1.5,
        keyed: Sequence[bool] = (),
    ) -> None:
        super().__init__()
        #: by position, whether a backend is sent a prompt_cache_key (none unless given)
        self._keyed = tuple(keyed) or (False,) * len(capacities)
        self.trees = [Picture(c) for c in capacities]
        self._held = [tree.blocks for tree in self.trees]
        #: per backend, the last prompts sent to it (newest last)
        self.recents = [deque[Prompt](maxlen=self.RECENT) for _ in capacities]
        #: the first blocks of all those prompts, each with how many of them start with it,
        #: kept up to date by ``sent`` until COLD decisions in a row find nothing warm (the
        #: window stands aside then, reading none), counted again from ``recents`` when read
        self._heads: dict[int, int] = {}
        self._counted = True
        #: decisions in a row whose prompt's first block no backend held
        self.cold = 0
        self._idle = self.IDLE if not any(self._keyed) else float("inf")  # (reads)
        self._unread = 0  # calls since the last whose prompt was read, while idle
        self.cache_keys = CacheKeys()  # the prompt_cache_keys of the backends that set them
        #: by position, the decisions that chose it for the prefix it holds warm
        self.hits = [0] * len(capacities)
        self._threshold = threshold
        self._abs = balance_abs
        self._rel = balance_rel

    @property
    def recent_heads(self) -> dict[int, int]:
        """The first blocks of the prompts in ``recents``, each with how many start with it."""
        if not self._counted:
            heads: dict[int, int] = {}
            for recent in self.recents:
                for prompt in recent:
                    heads[prompt.head] = heads.get(prompt.head, 0) + 1  # type: ignore[index]
            self._heads, self._counted = heads, True
        return self._heads

    def reads(self) -> bool:
        """Whether the next call's prompt is read (``choose_for`` and ``sent``): always, but
        only every SAMPLE-th once IDLE decisions in a row found nothing warm (then ``choose``,
        the pictures unchanged)."""
        if self.cold < self._idle:
            return True
        self._unread = unread = (self._unread + 1) % self.SAMPLE
        return not unread

    def choose(self, candidates: Sequence[Candidate]) -> int:
        """The index in ``candidates`` for a call whose prompt is not read: the least loaded,
        ties to the smallest picture, as with no match."""
        return self._least(candidates)

    def choose_for(self, candidates: Sequence[Candidate], prompt: Prompt) -> int:
        """The index in ``candidates`` for ``prompt``. The least loaded is always one with a
        free slot when any has one (its load is under 1), so only a match needs the slots
        counted."""
        head = prompt.head
        # the cheap test first, over every backend in one step: one not holding the first
        # block matches nothing (most prompts find none)
        if head is not None and any(map(contains, self._held, repeat(head))):
            held = self._held
            warm = [c for c in candidates if head in held[c.position]]
            if warm:
                self.cold = 0
                if not self._unbalanced(candidates):
                    room = [c for c in warm if c.in_flight + c.waiting < c.cap]
                    if room or all(c.in_flight + c.waiting >= c.cap for c in candidates):
                        warm = room or warm
                        trees = self.trees
                        matches = [trees[c.position].match(prompt) for c in warm]
                        best = max(matches)
                        if best * BLOCK_TOKENS >= self._threshold * prompt.tokens:
                            warm = [c for c, m in zip(warm, matches, strict=True) if m == best]
                            chosen = warm[self._least(warm)]
                            self.hits[chosen.position] += 1
                            return candidates.index(chosen)
                return self._least(candidates)
        self.cold += 1
        return self._least(candidates)

    def _least(self, pool: Sequence[Candidate]) -> int:
        """The least loaded of ``pool``, ties to the smallest picture (c.load inline)."""
        trees = self.trees
        keys = [((c.in_flight + c.waiting) / c.cap, trees[c.position].size) for c in pool]
        return self._lowest(pool, keys)

    def _unbalanced(self, candidates: Sequence[Candidate]) -> bool:
        counts = [c.in_flight + c.waiting for c in candidates]
        high, low = max(counts), min(counts)
        if high == low:
            return False
        margin = self._abs if self._abs is not None else max(1, min(c.cap for c in candidates) // 4)
        return high - low > margin and high > self._rel * low

    def sent(self, position: int, prompt: Prompt) -> bool:
        """``prompt`` went to the backend at ``position``; whether that backend takes a
        ``prompt_cache_key`` for it (``cache_keys``): it has a whole block and the backend sets
        keys."""
        head = prompt.head
        if head is None:
            return False
        self.trees[position].add(prompt)
        recent = self.recents[position]
        if self._counted:
            if self.cold >= self.COLD:
                self._counted = False  # the window reads none now: counted again when read
            else:
                heads = self._heads
                if len(recent) == self.RECENT:  # the oldest goes
                    gone = recent[0].head
                    count = heads.pop(gone)  # type: ignore[arg-type]
                    if count > 1:
                        heads[gone] = count - 1  # type: ignore[index]
                heads[head] = heads.get(head, 0) + 1
        recent.append(prompt)
        return self._keyed[position]


class FirstAvailable(_Base):
    """A fresh shuffle per decision; the router takes the first gate that admits without
    queuing."""

    name = "first_available"
    load_aware = True

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def order(self, candidates: Sequence[Candidate]) -> list[int]:
        indexes = list(range(len(candidates)))
        self._rng.shuffle(indexes)
        return indexes

    def choose(self, candidates: Sequence[Candidate]) -> int:
        return self.order(candidates)[0]


def make_strategy(profile: Profile, rng: random.Random) -> Strategy:
    """The strategy the profile names."""
    name = profile.strategy
    if name == "round_robin":
        return RoundRobin(len(profile.backends), profile.rotate_every)
    if name == "random":
        return Random(rng)
    if name == "weighted":
        return Weighted()
    if name == "least_loaded":
        return LeastLoaded()
    if name == "first_available":
        return FirstAvailable(rng)
    if name == "fastest":
        return Fastest()
    if name == "cache_aware":
        return CacheAware(
            [b.prefix_capacity for b in profile.backends],
            profile.cache_threshold,
            profile.balance_abs,
            profile.balance_rel,
            [b.sets_cache_key for b in profile.backends],
        )
    raise ValueError(f"unknown strategy {name!r}")


def _first_at_or_after(candidates: Sequence[Candidate], position: int) -> int:
    """Index of the first candidate whose position is >= ``position``, wrapping to the first."""
    for i, c in enumerate(candidates):
        if c.position >= position:
            return i
    return 0
