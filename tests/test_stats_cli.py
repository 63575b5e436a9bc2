"""`rrcli stats` as a user runs it: output shapes, stdin, errors, the plot and the man page."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from stats_tracegen import lines, run_records

from rrcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
GROUP_KEYS = [
    "key",
    "calls",
    "ok",
    "retried",
    "errors",
    "cached",
    "share",
    "latency_ms",
    "ttft_ms",
    "tpot_ms",
    "input_tokens",
    "output_tokens",
    "usage_estimated_calls",
    "cost_usd",
    "priced_calls",
    "cost_estimated_calls",
    "cached_input_tokens",
    "cache_hit_rate",
    "cache_saved_usd",
    "output_tokens_per_s",
    "peak_in_flight",
]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "run.traces.jsonl"
    path.write_bytes(lines(run_records("run-x", jobs=90, start_ms=1_767_000_000_000, seed=7)))
    return path


def test_json_is_parseable_with_stable_keys(traces):
    """--json prints one JSON document whose keys and their order are fixed."""
    result = CliRunner().invoke(main, ["stats", str(traces), "--json"])
    assert 0 == result.exit_code, result.output
    summary = json.loads(result.output)
    assert ["by", "groups", "total", "jobs", "runs", "malformed_lines"] == list(summary)
    assert ["local-vllm", "openai-a", "openai-b"] == [g["key"] for g in summary["groups"]]
    for group in [*summary["groups"], summary["total"]]:
        assert GROUP_KEYS == list(group)
        assert ["p50", "p95", "p99"] == list(group["latency_ms"])
    assert ["ok", "error", "invalid", "skipped"] == list(summary["jobs"])


def test_stdin_dash_reads_standard_input(traces):
    """`-` reads the traces from standard input, giving the numbers of the file itself."""
    runner = CliRunner()
    from_file = runner.invoke(main, ["stats", str(traces), "--json"]).output
    from_stdin = runner.invoke(main, ["stats", "-", "--json"], input=traces.read_bytes())
    assert json.loads(from_file) == json.loads(from_stdin.output)


def test_missing_file_is_a_clear_usage_error(traces, tmp_path):
    """A missing trace file names itself, prints no traceback and exits 2, reading nothing."""
    missing = tmp_path / "nope.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "rrcli", "stats", str(traces), str(missing)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert 2 == result.returncode
    assert f"{missing}: no such trace file" in result.stderr
    assert "Traceback" not in result.stderr
    assert "" == result.stdout


def test_table_and_plot_name_every_deployment(traces):
    """The table has a row per deployment and a total; --plot draws a strip per deployment
    with its peak against its cap."""
    result = CliRunner().invoke(main, ["stats", str(traces), "--plot"])
    assert 0 == result.exit_code, result.output
    assert 1 == result.output.count("total")
    for name, cap in (("openai-a", 4), ("openai-b", 2), ("local-vllm", 3)):
        assert re.search(rf"{name} .* peak \d/{cap}", result.output), name


def test_malformed_lines_are_reported_on_stderr(tmp_path):
    """Malformed lines do not fail the command; their count goes to standard error."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines(run_records("r", jobs=5, start_ms=1_767_000_000_000, seed=1)) + b"{x\n")
    result = subprocess.run(
        [sys.executable, "-m", "rrcli", "stats", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert 0 == result.returncode
    assert "rrcli: 1 malformed trace line(s) skipped\n" == result.stderr


def test_man_page_lists_every_option():
    """Every option that `rrcli stats --help` shows appears in man/rrcli-stats.1."""
    help_text = CliRunner().invoke(main, ["stats", "--help"]).output
    options = set(re.findall(r"(--[a-z][a-z-]+)", help_text))
    page = (ROOT / "man" / "rrcli-stats.1").read_text().replace("\\-", "-")
    assert {"--by", "--json", "--plot", "--run", "--since", "--help"} <= options
    assert set() == {o for o in options if o not in page}
