"""The provider registry and the table between the APIs: pure, light, one home for each fact."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from rrcli.config.starter import starter_profile
from rrcli.registry import NAMES, info, server_address
from rrcli.vocabulary import (
    anthropic_stop_reason,
    finish_reason_from_anthropic,
    openai_finish_reason,
)


@pytest.mark.parametrize(
    ("provider", "base_url", "expected"),
    [
        ("openai", "https://api.openai.com/v1", "api.openai.com"),
        ("openai", "https://user:pw@api.example.com:8443/v1?x=1", "api.example.com:8443"),
        ("anthropic", "http://[::1]:8080", "[::1]:8080"),
        ("anthropic", "https://[2001:db8::5]/", "[2001:db8::5]"),
        ("openai", "http://LocalHost:9000", "localhost:9000"),
        ("sim", "sim://local", None),
    ],
)
def test_server_address_is_host_and_port_once(provider, base_url, expected) -> None:
    """host[:port] without user info, path or query; IPv6 in brackets; the port only when the
    URL names one; None for a provider that needs no network."""
    assert expected == server_address(provider, base_url)


def test_an_http_provider_takes_its_server_address_from_the_registry() -> None:
    """An HTTP provider's ``server_address`` (written to every call record) is the registry's
    for its backend, as the run record's ``host`` is."""
    from rrcli.config.profile import Backend, RetrySettings
    from rrcli.providers import make_provider

    backend = Backend(id="b", provider="openai", base_url="http://k@[::1]:8080/v1")
    provider = make_provider(backend, None, retry=RetrySettings(), seed=None)
    asyncio.run(provider.aclose())
    assert "[::1]:8080" == provider.server_address


@pytest.mark.parametrize("provider", [n for n in NAMES if n not in ("azure", "bedrock", "vertex")])
def test_init_writes_the_registrys_defaults(provider) -> None:
    """`rrcli init` names the registry's default model (sim: ``sim-small``) and, for a
    provider with a network, its default base_url (azure has none: each resource has its
    own, a placeholder in the starter; bedrock's and vertex's follow each backend's region)."""
    profile = starter_profile(provider, 1)
    entry = info(provider)
    expected = entry.default_base_url if entry.needs_network else None
    assert (entry.default_model, expected) == (
        profile["defaults"]["model"],
        profile["backends"][0].get("base_url"),
    )


def test_init_names_the_sim_model_the_demo_profile_uses() -> None:
    """The sim starter profile's model is ``sim-small``, as in the demo profile."""
    assert "sim-small" == starter_profile("sim", 1)["defaults"]["model"]


@pytest.mark.parametrize(
    ("stop_reason", "result", "openai", "anthropic"),
    [
        ("end_turn", "stop", "stop", "end_turn"),
        ("max_tokens", "length", "length", "max_tokens"),
        ("tool_use", "tool_calls", "tool_calls", "tool_use"),
        ("stop_sequence", "stop_sequence", "stop", "stop_sequence"),
        ("refusal", "refusal", "content_filter", "refusal"),
        ("pause_turn", "pause_turn", "stop", "pause_turn"),
    ],
)
def test_finish_reasons_are_mapped_once(stop_reason, result, openai, anthropic) -> None:
    """An Anthropic stop reason becomes the result's finish reason (OpenAI's word where one
    means the same), and the result's reason becomes each batch format's word."""
    assert (result, openai, anthropic) == (
        finish_reason_from_anthropic(stop_reason),
        openai_finish_reason(result),
        anthropic_stop_reason(result),
    )


def test_content_filter_and_function_call_have_anthropic_words() -> None:
    """OpenAI's content_filter and function_call have Anthropic equivalents; None stays None."""
    assert ("refusal", "tool_use", None) == (
        anthropic_stop_reason("content_filter"),
        anthropic_stop_reason("function_call"),
        finish_reason_from_anthropic(None),
    )


def test_the_registry_the_table_and_the_records_load_no_http_client() -> None:
    """Importing the providers package, its registry, the table between the APIs, the results
    writer and the trace writer loads no HTTP client: validation and --help stay light."""
    modules = (
        "rrcli.providers",
        "rrcli.registry",
        "rrcli.vocabulary",
        "rrcli.records.results",
        "rrcli.records.trace",
        "rrcli.config.starter",
    )
    code = f"import sys; import {', '.join(modules)}; print('httpx2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "False" == out.stdout.strip()
