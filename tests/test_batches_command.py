"""``rrcli batches -p PROFILE``: the pool's Batch API batches listed (deployment, id, state,
counts, age) on every backend that has a Batch API, and cancelled with ``--cancel ID`` or
``--all``; run as the real command against ``rrcli sim``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from runkit import rrcli, write_profile

from rrcli.config.profile import Backend, Credentials, RetrySettings
from rrcli.providers import make_provider
from rrcli.providers.batch_api import batch_client

ONE, TWO = "sk-one-0123456789abcdef", "sk-two-0123456789abcdef"


def _submit(provider: str, url: str, key: str, count: int) -> str:
    """A batch made on ``key`` through the client, its id."""
    backend = Backend(
        id="maker",
        provider=provider,
        base_url=url,
        credentials=Credentials(api_key=key),
        allow_private=True,
    )
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}

    async def make() -> str:
        client: Any = batch_client(make_provider(backend, key, retry=RetrySettings(), seed=None))
        state = await client.submit([(f"j{i}", body) for i in range(count)])
        await client.aclose()
        return state.id

    return asyncio.run(make())


def _profile(tmp_path: Path, server: Any) -> Path:
    return write_profile(
        tmp_path / "pool.toml",
        [
            {"id": "gpt-a", "base_url": server.openai_url, "credentials": {"api_key_env": "K1"}},
            {"id": "gpt-twin", "base_url": server.openai_url, "credentials": {"api_key_env": "K1"}},
            {
                "id": "claude-b",
                "provider": "anthropic",
                "base_url": server.url,
                "credentials": {"api_key_env": "K2"},
            },
            {"id": "local", "provider": "sim"},
        ],
    )


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows by batch id: [deployment, id, state, counts..., age]."""
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return {row[1]: row for row in rows if len(row) > 2}


def test_lists_every_backends_batches_and_cancels_one_then_all(sim_server, tmp_path):
    """The list names each batch once with its deployment and state (two backends on one key
    see the same batches); --cancel ID cancels that one (on whichever backend holds it), --all
    every batch not ended; a backend without a Batch API is left out."""
    server = sim_server(batch_delay_ms=3_600_000, api_keys=[ONE, TWO])
    first = _submit("openai", server.openai_url, ONE, 3)
    second = _submit("openai", server.openai_url, ONE, 2)
    third = _submit("anthropic", server.url, TWO, 4)
    profile = _profile(tmp_path, server)
    env = {"K1": ONE, "K2": TWO}
    listed = rrcli("batches", "-p", profile, cwd=tmp_path, env=env)
    assert 0 == listed.returncode, listed.stderr
    rows = _rows(listed.stdout)
    assert 4 == len(listed.stdout.splitlines())  # the head and one row a batch
    assert {first: "gpt-a", second: "gpt-a", third: "claude-b"} == {
        k: v[0] for k, v in rows.items()
    }
    assert "validating" == rows[first][2]
    assert "in_progress" == rows[third][2]
    assert "local" not in listed.stdout
    one = rrcli("batches", "-p", profile, "--cancel", third, cwd=tmp_path, env=env)
    assert 0 == one.returncode, one.stderr
    assert f"cancelled {third}" in one.stdout
    assert "cancelled" == _rows(one.stdout)[third][2]
    assert "validating" == _rows(one.stdout)[first][2]
    every = rrcli("batches", "-p", profile, "--all", cwd=tmp_path, env=env)
    assert 0 == every.returncode, every.stderr
    assert {"cancelled"} == {row[2] for row in _rows(every.stdout).values()}
    assert ONE not in every.stdout + every.stderr


def test_an_unknown_batch_and_a_refused_key_exit_1(sim_server, tmp_path):
    """--cancel of an id no backend has, and a backend whose key the server refuses: each
    named on stderr, exit status 1, the other backend still listed, the key never shown."""
    server = sim_server(api_keys=[ONE])
    made = _submit("openai", server.openai_url, ONE, 1)
    profile = _profile(tmp_path, server)
    done = rrcli(
        "batches", "-p", profile, "--cancel", "batch_nope", cwd=tmp_path, env={"K1": ONE, "K2": TWO}
    )
    assert 1 == done.returncode
    assert made in done.stdout
    assert "--cancel batch_nope: no backend of this pool has that batch" in done.stderr
    assert "claude-b: HTTP 401" in done.stderr
    assert TWO not in done.stdout + done.stderr
