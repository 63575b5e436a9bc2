"""`rrcli validate` as a user runs it: exit codes, plain lines, --json, --strict, demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from rrcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
GOOD = (
    '[[backends]]\nid = "a"\nauth = "none"\nprovider = "sim"\n'
    '[[backends]]\nid = "b"\nprovider = "sim"\n'
)


def cli(*args: str | Path, env: dict, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command in its own process."""
    command = [sys.executable, "-m", "rrcli", *map(str, args)]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, ["validate", *args], env=env)


def test_ok_profile_exits_0_with_a_summary(tmp_path):
    """A valid profile: exit 0 and a summary line naming the pool."""
    path = tmp_path / "p.toml"
    path.write_text(GOOD)
    result = run(str(path))
    assert 0 == result.exit_code
    assert f"{path}: ok (0 errors, 0 warnings); 2 backends, strategy round_robin" in result.output


def test_errors_exit_1_with_one_plain_line_each(tmp_path):
    """Errors: exit 1; each is a `file:line: error: where: message — fix` line."""
    path = tmp_path / "p.toml"
    path.write_text(GOOD + "max_concurrency = 0\n")
    result = run(str(path))
    assert 1 == result.exit_code
    expected = (
        f'{path}:8: error: backends[1] (id "b"): max_concurrency: must be at least 1, got 0 '
        "— use 1 or more"
    )
    assert expected == result.output.splitlines()[0]


def test_unusable_profile_exits_2_with_one_message_and_no_traceback(tmp_path):
    """Not TOML: exit 2, one message on stderr naming the line and column."""
    path = tmp_path / "p.toml"
    path.write_text("[[backends]\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert 2 == result.exit_code
    assert 1 == len(result.output.strip().splitlines())
    assert result.output.startswith(f"rrcli: {path}:1:")
    assert "Traceback" not in result.output


def test_json_document_has_the_spec_shape_and_redacts_keys(tmp_path):
    """--json prints {ok, errors, warnings, profile, prices} with a literal key shown as ***."""
    path = tmp_path / "p.toml"
    path.write_text(
        GOOD + '[[backends]]\nid = "c"\ncredentials = { api_key = "sk-TOPSECRET" }\n'
        'base_url = "https://127.0.0.1/v1"\nallow_private = true\n'
    )
    result = run("--json", str(path))
    doc = json.loads(result.output)
    assert (0, True) == (result.exit_code, doc["ok"])
    assert ["ok", "errors", "warnings", "profile", "prices"] == list(doc)
    assert ["literal_key"] == [w["code"] for w in doc["warnings"]]
    assert {"api_key": "***"} == doc["profile"]["backends"][2]["credentials"]
    assert "sk-TOPSECRET" not in result.output


def test_validate_and_run_agree_on_an_unset_key_variable(tmp_path):
    """An unset api_key_env stops a run (exit 2), so validate calls it an error (exit 1): a CI
    check with validate fails where the run would. Exported, both pass that point."""
    path = tmp_path / "p.toml"
    path.write_text(
        GOOD + '[[backends]]\nid = "c"\ncredentials = { api_key_env = "RRCLI_T_UNSET" }\n'
        'base_url = "https://127.0.0.1/v1"\nallow_private = true\n'
    )
    unset = {**os.environ, "PYTHONPATH": str(ROOT), "RRCLI_T_UNSET": ""}
    checked = cli("validate", path, env=unset, cwd=tmp_path)
    assert 1 == checked.returncode
    expected = (
        f'{path}:10: error: backends[2] (id "c"): credentials.api_key_env: environment variable '
        "RRCLI_T_UNSET is not set — export RRCLI_T_UNSET=... before rrcli run"
    )
    assert expected in checked.stdout.splitlines()
    ran = cli("run", "--prompt", "hi", "-p", path, "--dry-run", env=unset, cwd=tmp_path)
    assert 2 == ran.returncode and "RRCLI_T_UNSET is not set" in ran.stderr
    exported = {**unset, "RRCLI_T_UNSET": "sk-test"}
    assert 0 == cli("validate", path, env=exported, cwd=tmp_path).returncode


def test_strict_turns_a_warning_into_an_error(tmp_path):
    """--strict: a warning (a literal key) becomes an error and the exit status 1."""
    path = tmp_path / "p.toml"
    path.write_text(
        GOOD + '[[backends]]\nid = "c"\ncredentials = { api_key = "sk-literal" }\n'
        'base_url = "https://127.0.0.1/v1"\nallow_private = true\n'
    )
    assert 0 == run(str(path)).exit_code
    assert 1 == run("--strict", str(path)).exit_code


def test_two_backends_on_one_key_and_model_are_warned_toward_gate_scope(tmp_path):
    """Two backends reading one key variable for one model: a warning saying their caps and
    limits are one account's, with the gate_scope that makes them count together; once they
    share it, no warning."""
    two = (
        '[[backends]]\nid = "a"\nmodel = "m"\ncredentials = { api_key_env = "RRCLI_T_KEY" }\n'
        '[[backends]]\nid = "b"\nmodel = "m"\ncredentials = { api_key_env = "RRCLI_T_KEY" }\n'
    )
    path = tmp_path / "p.toml"
    path.write_text(two)
    env = {"RRCLI_T_KEY": "sk-test"}
    result = run("--json", str(path), env=env)
    assert 0 == result.exit_code
    warnings = json.loads(result.output)["warnings"]
    [warning] = [w for w in warnings if w["code"] == "shared_key"]
    expected = (
        "shared_key",
        'backends "a", "b" share the key in RRCLI_T_KEY for model m: their caps and rate '
        "limits are one account's, counted here as if each had its own",
        'give them one gate_scope (gate_scope = "a" in each) so max_concurrency, rpm and tpm '
        "are enforced together, or give each its own key",
    )
    assert expected == (warning["code"], warning["message"], warning["fix"])
    path.write_text(two.replace('\nmodel = "m"', '\nmodel = "m"\ngate_scope = "acct"'))
    shared = json.loads(run("--json", str(path), env=env).output)["warnings"]
    assert [] == [w for w in shared if w["code"] == "shared_key"]


def test_demo_is_accepted_by_name():
    """`rrcli validate demo` checks the built-in demo pool: ok, three backends."""
    result = run("demo")
    assert 0 == result.exit_code
    assert "3 backends" in result.output


def test_missing_file_exits_2_with_a_fix(tmp_path):
    """A path that does not exist: exit 2 and a message pointing at rrcli init."""
    result = run(str(tmp_path / "nope.toml"))
    assert 2 == result.exit_code
    assert "no such file" in result.output and "rrcli init" in result.output


def test_terminal_table_lists_every_diagnostic(tmp_path):
    """On a terminal the diagnostics table has a row per problem with its line."""
    from rich.console import Console

    from rrcli._render import print_validation
    from rrcli.config.load import validate_profile

    path = tmp_path / "p.toml"
    path.write_text(GOOD + "max_concurrency = 0\nrpm = 0\n")
    console = Console(record=True, width=200, color_system=None)
    print_validation(validate_profile(path), console)
    text = console.export_text()
    assert 2 == text.count("error ")
    assert "max_concurrency" in text and "rpm" in text and "not usable" in text


def test_subprocess_validate_of_the_demo_file():
    """`python -m rrcli validate profiles/demo.toml` in a real process: exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "rrcli", "validate", "profiles/demo.toml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (0, "") == (proc.returncode, proc.stderr)
    assert "ok (0 errors, 0 warnings)" in proc.stdout
