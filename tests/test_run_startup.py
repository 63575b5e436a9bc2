"""What a run loads at start: only the parts its profile and flags use."""

from __future__ import annotations

import subprocess
import sys

from runkit import ROOT, write_jobs


def loaded_after_run(tmp_path, *flags: str) -> list[str]:
    """The exit code of ``rrcli run JOBS -p demo FLAGS`` (sim backends, output not a
    terminal), then whether httpx2, rich and structlog were imported by it."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 3)
    code = (
        "import sys; from click.testing import CliRunner; from rrcli.cli import main; "
        f"r = CliRunner().invoke(main, ['run', {str(jobs)!r}, '-p', 'demo', *{flags!r}]); "
        "print(r.exit_code, *(m in sys.modules for m in ('httpx2', 'rich', 'structlog')))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout.split()  # fmt: skip


def test_a_quiet_run_on_sim_backends_loads_no_http_client_no_display_no_logger(tmp_path):
    """A ``-q`` run off a terminal whose backends are all in-process (sim) and that fails no
    job never imports the HTTP client, rich or structlog: it calls no server, shows nothing
    and logs nothing."""
    assert ["0", "False", "False", "False"] == loaded_after_run(tmp_path, "-q")


def test_a_run_that_logs_and_prints_its_summary_loads_both_but_no_http_client(tmp_path):
    """Without ``-q`` the run's info lines (structlog) and the summary table (rich) are
    printed, still with no HTTP client."""
    assert ["0", "False", "True", "True"] == loaded_after_run(tmp_path)
