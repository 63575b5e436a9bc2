"""``rrcli batches``: the Batch API batches on a pool's keys, listed and cancelled.

Batches run for up to a day on the provider's side, whoever made them and whatever happened to
the run that did: this lists them on every backend of the profile that has a Batch API (one
row a batch: deployment, id, state, counts, age) and cancels one (``--cancel ID``, looked for on
every such backend) or every batch not ended (``--all``). A backend that cannot be asked (its
key unset, the server refusing) is named with why, and the others are still listed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rrcli.config.profile import Backend, Profile
from rrcli.errors import ProviderError, UsageError
from rrcli.providers import make_provider
from rrcli.providers.batch_api import BatchState, batch_client, has_batch_api

__all__ = ["BatchRow", "BatchesReport", "pool_batches"]


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One batch, and the deployment whose key holds it."""

    deployment: str
    state: BatchState


@dataclass(frozen=True, slots=True)
class BatchesReport:
    """The batches found (newest first), those cancelled, the backends that could not be
    asked (``problems``: one line each) and those without a Batch API (``skipped``)."""

    rows: tuple[BatchRow, ...]
    cancelled: tuple[str, ...]
    problems: tuple[str, ...]
    skipped: tuple[str, ...]
    missing: str | None = None  # the --cancel ID no backend knows

    @property
    def exit_code(self) -> int:
        return 1 if self.problems or self.missing else 0

    def lines(self, now: float) -> list[str]:
        """The table, then what was cancelled and what went wrong."""
        out = []
        if self.rows:
            table = [("DEPLOYMENT", "ID", "STATE", "COUNTS", "AGE")]
            table += [
                (r.deployment, r.state.id, r.state.status, _counts(r.state), age(now, r.state))
                for r in self.rows
            ]
            widths = [max(len(row[i]) for row in table) for i in range(5)]
            out += [
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                for row in table
            ]
        elif not self.problems:
            out.append("no batches on this pool's keys")
        out += [f"cancelled {batch_id}" for batch_id in self.cancelled]
        if self.missing is not None:
            out.append(f"rrcli: --cancel {self.missing}: no backend of this pool has that batch")
        out += [f"rrcli: {problem}" for problem in self.problems]
        return out


def _counts(state: BatchState) -> str:
    said = [f"{state.succeeded}/{state.total} ok"]
    for name in ("errored", "expired", "cancelled", "pending"):
        if getattr(state, name):
            said.append(f"{getattr(state, name)} {name}")
    return ", ".join(said)


def age(now: float, state: BatchState) -> str:
    """How long ago the batch was created: 42s, 7m, 3h, 2d."""
    seconds = max(0, int(now - state.created_at))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def pool_batches(
    profile_path: str | None,
    environ: Mapping[str, str],
    *,
    cancel: str | None = None,
    cancel_all: bool = False,
) -> BatchesReport:
    """The batches on the backends of the profile at ``profile_path`` (where ``rrcli run``
    looks without it), after cancelling ``cancel`` (a batch id) or, with ``cancel_all``, every
    batch not ended. UsageError when no backend has a Batch API."""
    from rrcli.config.load import load_profile, resolve_profile_path

    path = resolve_profile_path(profile_path, environ)
    profile = load_profile(path, environ=environ, ignore=frozenset({"env_unset"}))
    able = [b for b in profile.backends if has_batch_api(b.provider)]
    skipped = tuple(b.id for b in profile.backends if not has_batch_api(b.provider))
    if not able:
        raise UsageError(
            "no backend of this profile has a Batch API — OpenAI, Azure OpenAI and Anthropic "
            "backends have one"
        )
    problems: list[str] = []
    accounts: dict[tuple[str, str, str | None], tuple[Backend, str | None]] = {}
    for backend in able:
        try:
            key = backend.credentials.resolve(environ)
        except UsageError as exc:
            problems.append(f"{backend.id}: {exc}")
            continue
        # backends on one key at one address see the same batches: asked once, by the first
        accounts.setdefault((backend.provider, backend.base_url, key), (backend, key))
    found = asyncio.run(_ask(list(accounts.values()), profile, cancel, cancel_all))
    rows: list[BatchRow] = []
    cancelled: list[str] = []
    for backend, batches, done, problem in found:
        if problem is not None:
            problems.append(f"{backend.id}: {problem}")
        cancelled += done
        rows += [BatchRow(backend.id, state) for state in batches]
    rows.sort(key=lambda r: r.state.created_at, reverse=True)
    missing = cancel if cancel is not None and cancel not in cancelled else None
    return BatchesReport(tuple(rows), tuple(cancelled), tuple(problems), skipped, missing)


async def _ask(
    accounts: list[tuple[Backend, str | None]],
    profile: Profile,
    cancel: str | None,
    cancel_all: bool,
) -> list[tuple[Backend, list[BatchState], list[str], str | None]]:
    """Each account's batches (after its cancels), the ids cancelled, or why it failed."""

    async def one(
        backend: Backend, key: str | None
    ) -> tuple[Backend, list[BatchState], list[str], str | None]:
        client: Any = batch_client(make_provider(backend, key, retry=profile.retry, seed=None))
        done: list[str] = []
        try:
            batches = await client.batches()
            targets = [b.id for b in batches if (cancel_all and not b.ended) or b.id == cancel]
            for batch_id in targets:
                await client.cancel(batch_id)
                done.append(batch_id)
            if done:
                batches = await client.batches()
            return backend, batches, done, None
        except ProviderError as exc:
            return backend, [], done, str(exc)
        finally:
            await client.aclose()

    return list(await asyncio.gather(*(one(b, key) for b, key in accounts)))
