"""``rrcli.run`` as a program calls it: jobs as dicts, results to a callback, and nothing on
standard output or error unless the program configures logging."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from runkit import ROOT, write_profile

import rrcli


def _profile(tmp_path: Path, url: str) -> Path:
    return write_profile(tmp_path / "pool.toml", [{"id": "a", "base_url": url}])


def test_job_dicts_run_with_results_to_a_callback(tmp_path, sim_server):
    """An iterable of job dicts runs as the lines of a jobs file would: one result per job, each
    with its own id, a bad dict an invalid result naming its fault; nothing written to disk."""
    sim = sim_server()
    profile = rrcli.load_profile(_profile(tmp_path, sim.openai_url))
    jobs = ({"id": f"q{i}", "prompt": f"question {i}"} for i in range(3))
    bad = [{"id": "bad", "promt": "typo"}]
    got: list[dict] = []
    options = rrcli.RunOptions(jobs=[*jobs, *bad], on_result=got.append)
    summary = asyncio.run(rrcli.run(profile, options))
    by_id = {r["id"]: r for r in got}
    assert ["bad", "q0", "q1", "q2"] == sorted(by_id)
    assert ["ok", "ok", "ok"] == [by_id[f"q{i}"]["status"] for i in range(3)]
    assert "invalid" == by_id["bad"]["status"]
    assert (3, 1) == (summary.ok, summary.invalid)
    assert ["pool.toml"] == sorted(p.name for p in tmp_path.iterdir())


def test_a_path_given_as_text_is_a_jobs_file(tmp_path):
    """``RunOptions(jobs="x.jsonl")`` names a file as a Path would: outputs named after it."""
    options = rrcli.RunOptions(jobs="x.jsonl").with_defaults()
    assert (Path("x.results.jsonl"), Path("x.traces.jsonl")) == (options.out, options.traces)


_PROGRAM = """
import asyncio, logging, sys
import rrcli
if sys.argv[2] == "logging":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
profile = rrcli.load_profile(sys.argv[1])
got = []
options = rrcli.RunOptions(jobs=[{"id": 1, "prompt": "hi"}], on_result=got.append)
asyncio.run(rrcli.run(profile, options))
assert got[0]["status"] == "ok", got
"""


def _library_run(tmp_path: Path, url: str, mode: str) -> subprocess.CompletedProcess[str]:
    profile = _profile(tmp_path, url)
    return subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(profile), mode],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_library_run_is_silent(tmp_path, sim_server):
    """A program that configures no logging gets nothing from rrcli on stdout or stderr."""
    done = _library_run(tmp_path, sim_server().openai_url, "silent")
    assert (0, "", "") == (done.returncode, done.stdout, done.stderr)


def test_a_library_run_logs_where_the_caller_configured_logging(tmp_path, sim_server):
    """With ``logging.basicConfig``, rrcli's events go where the program sends its logs."""
    done = _library_run(tmp_path, sim_server().openai_url, "logging")
    assert (0, "") == (done.returncode, done.stdout)
    assert "rrcli.run_started" in done.stderr
