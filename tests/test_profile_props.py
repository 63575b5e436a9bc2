"""Property tests of the profile schema: round trips keep their meaning, mutations never crash."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rrcli.config.load import validate_profile
from rrcli.config.profile import STRATEGIES, profile_to_dict

ENV = {"KEY_1": "sk-1", "KEY_2": "sk-2"}
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def public(host: str) -> list[str]:
    """Every host is public: the property is about the schema, not DNS."""
    return ["104.18.6.192"]


ids = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)
small = st.integers(1, 64)
seconds = st.floats(0.01, 600, allow_nan=False)
credentials = st.sampled_from(
    [{"api_key_env": "KEY_1"}, {"api_key_env": "KEY_2"}, {"auth": "none"}]
)


@st.composite
def backend(draw, bid):
    provider = draw(st.sampled_from(["openai", "anthropic", "sim"]))
    out = {"id": bid, "provider": provider}
    if provider == "sim":
        out["sim"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "latency_ms": st.floats(0, 500),
                    "error_rate": st.floats(0, 1),
                    "output_tokens": st.integers(0, 100),
                },
            )
        )
    else:
        out["credentials"] = draw(credentials)
        api = "https://api.example.com" + ("/v1" if provider == "openai" else "")  # the API's base
        out["base_url"] = draw(st.sampled_from([api, "https://gw.example.org"]))
    extra = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "max_concurrency": small,
                "rpm": small,
                "tpm": st.integers(1, 10**7),
                "weight": st.floats(0.5, 10),
                "timeout": seconds,
                "model": ids,
                "headers": st.dictionaries(
                    st.sampled_from(["X-Team", "OpenAI-Project"]), ids, max_size=2
                ),
                "params": st.fixed_dictionaries(
                    {}, optional={"temperature": st.floats(0, 2), "max_tokens": small}
                ),
                "gate_scope": ids,
                "reasoning_feedback": st.booleans(),
                "price": st.fixed_dictionaries(
                    {"input": st.floats(0, 100), "output": st.floats(0, 100)}
                ),
            },
        )
    )
    return {**out, **extra}


@st.composite
def profiles(draw):
    bids = draw(st.lists(ids, min_size=1, max_size=4, unique=True))
    data = {
        "name": draw(ids),
        "strategy": draw(st.sampled_from(STRATEGIES)),
        "rotate_every": draw(small),
        "binding": draw(st.sampled_from(["request", "session"])),
        "backends": [draw(backend(b)) for b in bids],
    }
    data.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "concurrency": small,
                    "seed": st.integers(0, 2**31),
                    "defaults": st.fixed_dictionaries(
                        {}, optional={"max_concurrency": small, "timeout": seconds}
                    ),
                    "retry": st.fixed_dictionaries(
                        {},
                        optional={
                            "max_retries": st.integers(0, 10),
                            "max_retry_time": seconds,
                            "retry_on_status": st.lists(st.integers(100, 599), max_size=5),
                            "respect_retry_after": st.booleans(),
                            "failover": st.booleans(),
                        },
                    ),
                    "gate": st.fixed_dictionaries(
                        {},
                        optional={
                            "kind": st.just("redis"),
                            "lease": seconds,
                            "adaptive": st.booleans(),
                        },
                    ),
                    "cooldown": st.fixed_dictionaries(
                        {},
                        optional={"consecutive_failures": st.integers(0, 10), "duration": seconds},
                    ),
                },
            )
        )
    )
    return data


def validate_data(data, folder: Path):
    path = folder / "p.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return validate_profile(path, environ=ENV, resolve=public)


@SETTINGS
@given(profiles())
def test_round_trip_through_the_normalized_form_keeps_the_meaning(data):
    """profile_to_dict → tomli_w → validate gives the same profile, with no errors."""
    with tempfile.TemporaryDirectory() as folder:
        first = validate_data(data, Path(folder))
        assert [] == [str(d) for d in first.errors]
        again = validate_data(profile_to_dict(first.profile, redact=False), Path(folder))
        assert [] == [str(d) for d in again.errors]
        assert first.profile == dataclasses.replace(again.profile, source=first.profile.source)


def mutate(data, draw):
    """One random damage: a wrong type, an unknown key, a deleted key or a bad value."""
    target = draw(st.sampled_from(["top", "backend", "retry"]))
    table = data
    if target == "backend":
        backends = data.get("backends")
        if isinstance(backends, list) and backends and isinstance(backends[0], dict):
            table = backends[0]
    elif target == "retry" and isinstance(data.setdefault("retry", {}), dict):
        table = data["retry"]
    # an earlier mutation may have replaced that table with junk: then damage the top level
    kind = draw(st.sampled_from(["type", "unknown", "delete", "value"]))
    keys = sorted(table) or ["x"]
    key = draw(st.sampled_from(keys))
    junk = st.one_of(
        st.booleans(),
        st.integers(-5, 5),
        st.floats(allow_nan=False),
        st.text(max_size=5),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(ids, st.integers(), max_size=2),
    )
    if kind == "unknown":
        table[draw(ids) + "_x"] = draw(junk)
    elif kind == "delete":
        table.pop(key, None)
    else:
        table[key] = draw(junk)


@SETTINGS
@given(profiles(), st.data())
def test_mutated_profiles_give_diagnostics_never_exceptions(data, extra):
    """Whatever damage a profile takes, validate returns diagnostics; it never raises."""
    for _ in range(extra.draw(st.integers(1, 3))):
        mutate(data, extra.draw)
    with tempfile.TemporaryDirectory() as folder:
        report = validate_data(data, Path(folder))
    assert all(d.severity in ("error", "warning") for d in report.diagnostics)
    assert (report.profile is None) == bool(report.errors)
