"""`rrcli init`: a starter profile that validates as written, never written over by accident."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rrcli.cli import main
from rrcli.config.load import validate_profile
from rrcli.config.starter import key_variables
from rrcli.registry import NAMES

# the variables the starter profiles name, exported as a user would
KEYS = {name: "sk-test" for provider in NAMES for name in key_variables(provider, 3)}


@pytest.mark.parametrize("provider", NAMES)
def test_starter_profile_validates_as_written(tmp_path, provider):
    """The starter profile's only errors are its unset key variables, one per backend (none
    for sim and a server on this machine); with them exported it has no errors, and no
    warning but an unresolvable public host (on a machine without DNS)."""
    path = tmp_path / "rrcli.toml"
    result = CliRunner().invoke(
        main, ["init", str(path), "--provider", provider, "--backends", "2"]
    )
    assert 0 == result.exit_code
    bare = validate_profile(path, environ={})
    assert {"env_unset"} >= {e.code for e in bare.errors}
    expected = (
        ["backends[0].credentials.api_key_env", "backends[1].credentials.api_key_env"]
        if key_variables(provider, 2)
        else []
    )
    assert expected == [e.path for e in bare.errors]
    report = validate_profile(path, environ=KEYS)
    assert [] == list(report.errors)
    assert {"host_unresolved"} >= {w.code for w in report.warnings}
    assert 2 == len(report.profile.backends)


def test_starter_keys_are_one_variable_per_backend(tmp_path):
    """openai: OPENAI_API_KEY_1..N, one per backend, never shared."""
    path = tmp_path / "rrcli.toml"
    CliRunner().invoke(main, ["init", str(path), "--backends", "3"])
    names = [
        b.credentials.api_key_env for b in validate_profile(path, environ=KEYS).profile.backends
    ]
    assert ["OPENAI_API_KEY_1", "OPENAI_API_KEY_2", "OPENAI_API_KEY_3"] == names


def test_default_path_is_rrcli_toml_in_the_working_folder(tmp_path, monkeypatch):
    """Without PATH, init writes ./rrcli.toml."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init", "--provider", "sim"])
    assert 0 == result.exit_code
    assert validate_profile(tmp_path / "rrcli.toml").ok


def test_never_overwrites_without_force(tmp_path):
    """An existing file is kept (exit 2, message naming --force); --force replaces it."""
    path = tmp_path / "rrcli.toml"
    path.write_text("# mine\n")
    kept = CliRunner().invoke(main, ["init", str(path)])
    assert (2, "# mine\n") == (kept.exit_code, path.read_text())
    assert "--force" in kept.output
    forced = CliRunner().invoke(main, ["init", str(path), "--force", "--provider", "sim"])
    assert 0 == forced.exit_code
    assert validate_profile(path).ok


def test_bad_backends_count_is_a_usage_error(tmp_path):
    """--backends 0 is refused by the option parser (exit 2)."""
    result = CliRunner().invoke(main, ["init", str(tmp_path / "x.toml"), "--backends", "0"])
    assert 2 == result.exit_code
