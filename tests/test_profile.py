"""The profile rules of SPEC §2, as a user meets them in `rrcli validate`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rrcli.config.load import load_profile, validate_profile
from rrcli.config.profile import Backend, Credentials
from rrcli.errors import ProfileError
from rrcli.registry import NAMES

OPENAI = """
[[backends]]
id = "a"
credentials = { api_key_env = "KEY_A" }

[[backends]]
id = "b"
credentials = { api_key_env = "KEY_B" }
"""
ENV = {"KEY_A": "sk-a-secret", "KEY_B": "sk-b-secret"}


def public(host: str) -> list[str]:
    """A resolver for tests: every name is a public address (no DNS needed)."""
    return ["104.18.6.192"]


def check(tmp_path: Path, text: str, environ=None, resolve=public, **kw):
    path = tmp_path / "profile.toml"
    path.write_text(text, encoding="utf-8")
    return validate_profile(
        path, environ=ENV if environ is None else environ, resolve=resolve, **kw
    )


def codes(report) -> list[tuple[str, str, str]]:
    return [(d.severity, d.path, d.code) for d in report.diagnostics]


def test_a_good_profile_has_no_diagnostics_and_builds_the_pool(tmp_path):
    """Two openai backends with their keys set: no diagnostics; the model has both backends."""
    report = check(tmp_path, OPENAI)
    assert [] == codes(report)
    assert ("a", "b") == tuple(b.id for b in report.profile.backends)
    assert Credentials(api_key_env="KEY_B") == report.profile.backends[1].credentials


def test_every_problem_is_reported_at_once_with_its_line(tmp_path):
    """Three independent mistakes give three errors, each with the line of its key."""
    text = 'strategy = "fastest"\nrotate_every = 0\n' + OPENAI + "max_concurrency = -1\nrpm = 0\n"
    report = check(tmp_path, text)
    expected = [
        ("error", "rotate_every", 2),
        ("error", "backends[1].max_concurrency", 11),
        ("error", "backends[1].rpm", 12),
    ]
    assert expected == [(d.severity, d.path, d.line) for d in report.diagnostics]
    assert 'backends[1] (id "b"): max_concurrency' == report.diagnostics[1].subject


def test_unknown_key_suggests_the_close_one(tmp_path):
    """A misspelt key is an error with a "did you mean"."""
    report = check(tmp_path, 'stratgy = "random"\n' + OPENAI)
    (diag,) = report.errors
    assert ("stratgy", 'unknown key "stratgy"', 'did you mean "strategy"?') == (
        diag.path,
        diag.message,
        diag.fix,
    )


@pytest.mark.parametrize(
    ("line", "path", "expected"),
    [
        ("max_concurrency = true", "backends[1].max_concurrency", "an integer"),
        ('timeout = "30"', "backends[1].timeout", "a number"),
        ("allow_private = 1", "backends[1].allow_private", "true or false"),
        ("headers = 3", "backends[1].headers", "a table"),
    ],
)
def test_wrong_types_name_the_expected_type(tmp_path, line, path, expected):
    """A value of the wrong type names the type expected; a bool is not an integer."""
    report = check(tmp_path, OPENAI + line + "\n")
    assert [(path, "wrong_type")] == [(d.path, d.code) for d in report.errors]
    assert report.errors[0].message.startswith(f"expected {expected}, got")


def test_a_quoted_number_gets_the_unquoted_fix(tmp_path):
    """`max_concurrency = "4"` is told to remove the quotes."""
    report = check(tmp_path, OPENAI + 'max_concurrency = "4"\n')
    assert "remove the quotes: max_concurrency = 4" == report.errors[0].fix


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ('strategy = "round-robin"', "strategy", "round-robin"),
        ('binding = "sticky"', "binding", "sticky"),
        ('[gate]\nkind = "memcached"', "gate.kind", "memcached"),
    ],
)
def test_enums_name_the_bad_value_and_the_accepted_ones(tmp_path, text, path, value):
    """A strategy, binding or gate kind outside its names is an error naming both."""
    report = check(tmp_path, text + "\n" + OPENAI)
    (diag,) = report.errors
    assert path == diag.path
    assert f'"{value}"' in diag.message
    assert "accepted:" in diag.message


def test_bad_provider_names_the_accepted_ones(tmp_path):
    """provider = "antropic" suggests "anthropic"."""
    report = check(tmp_path, OPENAI + 'provider = "antropic"\n')
    assert 'did you mean "anthropic"?' == report.errors[0].fix
    assert f"(accepted: {', '.join(NAMES)})" in report.errors[0].message


def test_duplicate_ids_name_both_indexes(tmp_path):
    """Two backends with one id: an error naming backends[0] and backends[1]."""
    report = check(tmp_path, OPENAI.replace('id = "b"', 'id = "a"'))
    (diag,) = report.errors
    assert ("backends[1].id", "duplicate_id") == (diag.path, diag.code)
    assert "backends[0] and backends[1]" in diag.message


def test_id_pattern(tmp_path):
    """An id with a space is refused; a missing id is an error too."""
    report = check(tmp_path, OPENAI.replace('id = "b"', 'id = "b c"').replace('id = "a"\n', ""))
    assert [("backends[0].id", "missing_id"), ("backends[1].id", "bad_value")] == [
        (d.path, d.code) for d in report.errors
    ]


def test_no_backends_is_an_error_and_one_is_a_warning(tmp_path):
    """No backends → error; one backend → the "pool of one" warning."""
    none = check(tmp_path, 'name = "x"\n')
    one = check(tmp_path, OPENAI.split('\n[[backends]]\nid = "b"')[0])
    assert [("error", "backends", "no_backends")] == codes(none)
    assert [("warning", "backends", "pool_of_one")] == codes(one)
    assert "a pool of one: nothing to balance" == one.diagnostics[0].message


def test_defaults_are_inherited_and_the_backend_wins(tmp_path):
    """[defaults] fills any backend field; a backend's own value wins; then built-ins."""
    text = '[defaults]\nmodel = "m-default"\nmax_concurrency = 2\ntimeout = 9\n' + OPENAI
    text += 'model = "m-own"\n'
    a, b = check(tmp_path, text).profile.backends
    assert ("m-default", 2, 9.0, 500.0) == (a.model, a.max_concurrency, a.timeout, 500.0)
    assert ("m-own", 2) == (b.model, b.max_concurrency)
    assert Backend("x").rpm == a.rpm


def test_credentials_from_defaults_never_merge_with_a_backends_own(tmp_path):
    """A backend that sets its own credentials does not take [defaults]' keys into them."""
    text = '[defaults]\ncredentials = { api_key_env = "SHARED" }\n'
    text += '[[backends]]\nid = "a"\n[[backends]]\nid = "b"\ncredentials = { api_key = "sk-b" }\n'
    report = check(tmp_path, text, environ={"SHARED": "sk-shared"})
    a, b = report.profile.backends
    assert Credentials(api_key_env="SHARED") == a.credentials
    assert (None, "sk-b") == (b.credentials.api_key_env, b.credentials.api_key)
    assert [("warning", "backends[1].credentials.api_key", "literal_key")] == codes(report)


def test_auth_none_in_either_spelling(tmp_path):
    """`auth = "none"` on the backend or inside credentials needs no key."""
    text = '[[backends]]\nid = "a"\nauth = "none"\n'
    text += '[[backends]]\nid = "b"\ncredentials = { auth = "none" }\n'
    report = check(tmp_path, text)
    assert [] == codes(report)
    assert ["none", "none"] == [b.credentials.auth for b in report.profile.backends]


def test_missing_credentials_say_what_an_openai_backend_needs(tmp_path):
    """An openai backend with no credentials: the SPEC's message and fix."""
    report = check(tmp_path, '[[backends]]\nid = "b"\n[[backends]]\nid = "c"\nauth = "none"\n')
    (diag,) = report.errors
    assert ("backends[0].credentials", "missing") == (diag.path, diag.message)
    assert (
        'an openai backend needs credentials.api_key_env, credentials.api_key or auth = "none"'
        == diag.fix
    )


def test_unset_env_is_an_error_at_validate_as_at_run(tmp_path):
    """api_key_env naming an unset variable stops a run, so validate calls it an error too."""
    plain = check(tmp_path, OPENAI, environ={"KEY_A": "x"})
    assert [("error", "backends[1].credentials.api_key_env", "env_unset")] == codes(plain)
    assert plain.profile is None
    with pytest.raises(ProfileError) as info:
        load_profile(tmp_path / "profile.toml", environ={"KEY_A": "x"}, resolve=public)
    assert ["env_unset"] == [d.code for d in info.value.diagnostics]
    assert "KEY_B" in str(info.value)


def test_no_output_ever_shows_a_key(tmp_path):
    """A literal key (and a key pasted into api_key_env by mistake) never reaches a message."""
    text = OPENAI.replace('api_key_env = "KEY_B"', 'api_key = "sk-LITERAL-123"')
    text = text.replace('api_key_env = "KEY_A"', 'api_key_env = "sk-PASTED-456"')
    report = check(tmp_path, text)
    shown = "\n".join(str(d) for d in report.diagnostics) + repr(report.as_dict())
    assert ["bad_value", "literal_key"] == [d.code for d in report.diagnostics]
    assert "sk-LITERAL-123" not in shown
    assert "sk-PASTED-456" not in shown


@pytest.mark.parametrize("header", ["Authorization", "x-api-key", "x-goog-api-key"])
def test_key_headers_are_refused(tmp_path, header):
    """A key header in `headers` would bypass credentials: refused, pointing at credentials."""
    report = check(tmp_path, OPENAI + f'headers = {{ {header} = "Bearer sk-zz" }}\n')
    (diag,) = report.errors
    assert (f"backends[1].headers.{header}", "key_header") == (diag.path, diag.code)
    assert "credentials" in diag.fix
    assert "sk-zz" not in str(diag)


@pytest.mark.parametrize(
    ("url", "allow", "expected"),
    [
        ("http://127.0.0.1:8000/v1", False, [("error", "private_address")]),
        ("http://127.0.0.1:8000/v1", True, []),
        ("https://10.1.2.3/v1", False, [("error", "private_address")]),
        ("https://[::1]:8000/v1", False, [("error", "private_address")]),
        ("https://0.0.0.0/v1", False, [("error", "private_address")]),
        ("https://169.254.169.254/v1", True, [("error", "metadata_address")]),
        ("https://[::ffff:169.254.169.254]/", True, [("error", "metadata_address")]),
        ("https://[fd00:ec2::254]/", True, [("error", "metadata_address")]),
        ("https://metadata.google.internal/", True, [("error", "metadata_address")]),
        ("ftp://example.com/v1", False, [("error", "bad_url")]),
        ("http://api.example.com/v1", False, [("warning", "clear_text")]),
        ("https://user:pw@api.example.com/v1", False, [("error", "url_userinfo")]),
    ],
)
def test_base_url_address_policy(tmp_path, url, allow, expected):
    """Private hosts need allow_private; the metadata address is refused always; http warns."""
    text = OPENAI + f'base_url = "{url}"\nallow_private = {str(allow).lower()}\n'
    report = check(tmp_path, text)
    assert expected == [(d.severity, d.code) for d in report.diagnostics]
    assert all(d.path == "backends[1].base_url" for d in report.diagnostics)


def test_hosts_that_resolve_to_private_or_metadata_addresses(tmp_path):
    """A name is judged by what it resolves to: localhost is loopback; the integer form of
    169.254.169.254 resolves to it and is refused even with allow_private (system resolver)."""
    text = OPENAI + 'base_url = "http://2852039166/"\nallow_private = true\n'
    report = check(tmp_path, text, resolve=None)
    assert [("backends[1].base_url", "metadata_address")] == [
        (d.path, d.code) for d in report.errors
    ]
    text = OPENAI + 'base_url = "https://localhost/v1"\n'
    local = check(tmp_path, text, resolve=None)
    assert ["private_address"] == [d.code for d in local.errors]
    assert "resolves to 127.0.0.1" in local.errors[0].message


def test_a_host_that_does_not_resolve_is_a_warning_once(tmp_path):
    """Unresolvable hosts warn (once per host) and never fail validation."""

    def nowhere(host):
        raise OSError(-2, "Name or service not known")

    report = check(tmp_path, OPENAI, resolve=nowhere)
    assert [("warning", "backends[0].base_url", "host_unresolved")] == codes(report)


def test_a_hanging_resolver_does_not_hang_validate(tmp_path):
    """A resolver that never answers costs at most the 2 s budget, and gives a warning."""
    import threading

    never = threading.Event()

    def hang(host):
        never.wait(30)
        raise OSError("late")

    report = check(tmp_path, OPENAI, resolve=hang)
    never.set()
    assert ["host_unresolved"] == [d.code for d in report.diagnostics]
    assert "no answer within 2 s" in report.diagnostics[0].message


def test_same_model_lists_the_models(tmp_path):
    """same_model = true with two models: an error listing each model and its backends."""
    report = check(tmp_path, "same_model = true\n" + OPENAI + 'model = "gpt-4o"\n')
    (diag,) = report.errors
    assert "gpt-4o-mini (a); gpt-4o (b)" in diag.message


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("[retry]\nmax_retries = -1", "retry.max_retries"),
        ("[retry]\nbackoff_initial = 5.0\nbackoff_max = 1.0", "retry.backoff_max"),
        ("[retry]\nretry_on_status = [429, 99]", "retry.retry_on_status[1]"),
        ('[gate]\nkind = "redis"\nurl = "http://127.0.0.1"', "gate.url"),
        ("[gate]\nlease = 0", "gate.lease"),
        ("[cooldown]\nduration = 0", "cooldown.duration"),
        ("[cooldown]\nround_robin = 1", "cooldown.round_robin"),
        ("concurrency = 0", "concurrency"),
        ('strategy = "weighted"\n[defaults]\nweight = 0', "strategy"),
        ("[defaults]\nprice = { input = -1 }", "defaults.price.input"),
        ('[defaults]\nid = "x"', "defaults.id"),
    ],
)
def test_ranges_and_sections(tmp_path, text, path):
    """Each out-of-range value or bad section value is one error at its key path."""
    report = check(tmp_path, text + "\n" + OPENAI)
    assert [path] == [d.path for d in report.errors]


def test_sim_backends_need_no_key_and_rates_are_bounded(tmp_path):
    """A sim backend needs no credentials; error_rate must lie in [0, 1]; unknown sim keys."""
    text = '[[backends]]\nid = "s1"\nprovider = "sim"\nsim = { latency_ms = 5 }\n'
    text += '[[backends]]\nid = "s2"\nprovider = "sim"\nsim = { error_rate = 1.5, latncy_ms = 1 }\n'
    report = check(tmp_path, text)
    assert [
        ("backends[1].sim.error_rate", "bad_value"),
        ("backends[1].sim.latncy_ms", "unknown_key"),
    ] == sorted((d.path, d.code) for d in report.errors)


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"", "empty"),
        (b"\xff\xfe not utf-8", "not_utf8"),
        (b'name = "x\n', "toml_syntax"),
        (b"x" * (1024 * 1024 + 1), "too_large"),
    ],
)
def test_unusable_files_give_one_diagnostic(tmp_path, content, code):
    """Not TOML, not UTF-8, empty or huge: one diagnostic, not readable (exit 2)."""
    path = tmp_path / "p.toml"
    path.write_bytes(content)
    report = validate_profile(path)
    assert [code] == [d.code for d in report.diagnostics]
    assert (False, 2) == (report.readable, report.exit_code)


def test_toml_syntax_error_has_line_and_column(tmp_path):
    """A TOML syntax error names its line and column."""
    path = tmp_path / "p.toml"
    path.write_text('name = "x"\nstrategy = round_robin\n')
    (diag,) = validate_profile(path).diagnostics
    assert (2, 12) == (diag.line, diag.column)
    assert str(diag).startswith(f"{path}:2:12: not valid TOML")


def test_missing_file_and_directory(tmp_path):
    """A missing path and a directory are unusable, each with a fix."""
    missing = validate_profile(tmp_path / "nope.toml").diagnostics[0]
    folder = validate_profile(tmp_path).diagnostics[0]
    assert ("missing", "not_a_file") == (missing.code, folder.code)
    assert "rrcli init" in missing.fix


def test_the_schema_knows_every_field_of_the_model():
    """Each section of the schema has exactly the fields of its dataclass, so no field of the
    model is unreachable from a profile and no key is accepted that the model cannot hold."""
    from dataclasses import fields

    from rrcli.config import schema as v
    from rrcli.config.profile import (
        CooldownSettings,
        GateSettings,
        Price,
        RetrySettings,
        SimSettings,
    )

    def names(cls):
        return {f.name for f in fields(cls)}

    assert names(RetrySettings) == set(v.RETRY)
    assert names(GateSettings) == set(v.GATE)
    assert names(CooldownSettings) == set(v.COOLDOWN)
    assert names(SimSettings) == set(v.SIM)
    assert names(Price) == set(v.PRICE)
    assert names(Backend) == set(v.BACKEND) - {"auth"}
