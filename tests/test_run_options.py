"""The library applies SPEC §1's defaults itself: `rrcli.run()` behaves as `rrcli run` does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from runkit import read_jsonl, write_jobs, write_profile

import rrcli
from rrcli.config.load import demo_profile_path
from rrcli.errors import UsageError
from rrcli.running.checks import validate
from rrcli.running.options import RunOptions


def test_a_library_run_writes_the_default_outputs_in_the_working_folder(tmp_path, monkeypatch):
    """`rrcli.run(profile, RunOptions(jobs=Path("in/x.jsonl")))` writes x.results.jsonl and
    x.traces.jsonl in the working folder, as the CLI does."""
    (tmp_path / "in").mkdir()
    jobs = write_jobs(tmp_path / "in" / "x.jsonl", 3)
    monkeypatch.chdir(tmp_path)
    profile = rrcli.load_profile(demo_profile_path(), environ={})
    summary = asyncio.run(rrcli.run(profile, rrcli.RunOptions(jobs=jobs)))
    assert 3 == summary.ok
    assert 3 == len(read_jsonl(tmp_path / "x.results.jsonl"))
    traces = read_jsonl(tmp_path / "x.traces.jsonl")
    assert 3 == sum(record["event"] == "call" for record in traces)


@pytest.mark.parametrize(
    ("options", "out", "traces"),
    [
        (RunOptions(jobs=Path("data/x.jsonl")), "x.results.jsonl", "x.traces.jsonl"),
        (RunOptions(), "stdin.results.jsonl", "stdin.traces.jsonl"),
        (RunOptions(prompts=("hi",)), None, None),
        (RunOptions(prompts=("hi",), traces=Path("t.jsonl")), None, "t.jsonl"),
        (RunOptions(jobs=Path("x.jsonl"), out=Path("r.jsonl")), "r.jsonl", "x.traces.jsonl"),
    ],
)
def test_default_outputs(options, out, traces):
    """Outputs not named default to `<jobs stem>.results.jsonl` and `.traces.jsonl` (stem
    `stdin` for standard input); prompts print their results and write no trace unless one is
    named; a named output is kept. Applying the defaults twice changes nothing more."""
    resolved = options.with_defaults()
    assert (out, traces) == (
        None if resolved.out is None else str(resolved.out),
        None if resolved.traces is None else str(resolved.traces),
    )
    assert resolved == resolved.with_defaults()


def test_resume_and_overwrite_cannot_both_be_asked():
    """Options asking to resume and to overwrite at once are refused before anything runs."""
    with pytest.raises(UsageError, match="contradict"):
        RunOptions(jobs=Path("x.jsonl"), resume=True, overwrite=True)


def test_validate_report_is_built_by_the_library(tmp_path):
    """The `rrcli validate --json` document comes from one library call: the profile, the jobs
    file's shapes and invalid lines, the backends' prices, and a failed check making the report
    not ok (exit 1)."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"prompt": "a"}\nnope\n')
    report = validate("demo", environ={}, jobs=jobs)
    document = report.as_dict()
    assert ["ok", "errors", "warnings", "profile", "jobs", "prices"] == list(document)
    assert (False, 1, 1) == (
        document["ok"],
        document["jobs"]["jobs"],
        len(document["jobs"]["invalid"]),
    )
    assert 1 == report.exit_code


def test_rrcli_run_is_the_run_function_after_the_runtime_is_imported():
    """`rrcli.run` is the library's run function, also once `rrcli.running.*` modules are
    loaded."""
    from rrcli.running.runner import run

    assert run is rrcli.run


def test_rrcli_run_takes_job_dicts_after_the_runtime_is_imported(tmp_path):
    """`rrcli.run(profile, options)` runs job dicts, results to a callback, also once the
    runtime's modules are loaded."""
    from rrcli.running.runner import run  # noqa: F401

    profile = rrcli.load_profile(
        write_profile(tmp_path / "p.toml", [{"id": "a", "provider": "sim"}])
    )
    got: list[dict] = []
    options = rrcli.RunOptions(jobs=[{"prompt": "hi"}], on_result=got.append)
    summary = asyncio.run(rrcli.run(profile, options))
    assert (1, ["ok"]) == (summary.ok, [r["status"] for r in got])


def test_a_halted_run_sends_nothing_more_and_exits_with_the_halt_code(tmp_path, monkeypatch):
    """A run halted by itself before its first job (as a dead pool or a spent budget halts
    it) writes no result for the jobs it never started, is not "interrupted", and its exit
    code is the halt's."""
    from rrcli.routing.control import Halt, RunControl

    jobs = write_jobs(tmp_path / "x.jsonl", 5)
    monkeypatch.chdir(tmp_path)
    profile = rrcli.load_profile(demo_profile_path(), environ={})
    control = RunControl()
    halt = Halt(3, "budget", "budget reached")
    on_start = lambda summary, router: control.halt(halt)  # noqa: E731
    summary = asyncio.run(
        rrcli.run(profile, RunOptions(jobs=jobs), control=control, on_start=on_start)
    )
    assert (halt, False, 3) == (summary.halted, summary.interrupted, summary.exit_code)
    assert [] == read_jsonl(tmp_path / "x.results.jsonl")
    assert 0 == sum(record["event"] == "call" for record in read_jsonl(tmp_path / "x.traces.jsonl"))
