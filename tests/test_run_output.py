"""What `rrcli run` leaves and shows, as a user checks it: --overwrite starts both outputs
afresh, every time in the JSON outputs has the same precision."""

from __future__ import annotations

import json
import re
from pathlib import Path

from runkit import ROOT, popen, read_jsonl, rrcli, write_jobs


def test_overwrite_starts_the_traces_afresh_too(tmp_path):
    """Two runs with --overwrite: the results and the traces hold the second run only, and
    `stats` reads one run of 20 jobs."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 20)
    for _ in range(2):
        result = rrcli("run", jobs, "-p", "demo", "--overwrite", "--seed", "1", cwd=tmp_path)
        assert 0 == result.returncode, result.stderr
    traces = read_jsonl(tmp_path / "jobs.traces.jsonl")
    assert 1 == len({record["run_id"] for record in traces})
    assert 20 == len(read_jsonl(tmp_path / "jobs.results.jsonl"))
    stats = json.loads(
        rrcli("stats", tmp_path / "jobs.traces.jsonl", "--json", cwd=tmp_path).stdout
    )
    assert (1, 20) == (len(stats["runs"]), stats["jobs"]["ok"])


def test_without_overwrite_a_resumed_run_appends_its_traces(tmp_path):
    """--resume keeps the earlier run's trace records: the file holds both runs."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 5)
    assert 0 == rrcli("run", jobs, "-p", "demo", cwd=tmp_path).returncode
    assert 0 == rrcli("run", jobs, "-p", "demo", "--resume", cwd=tmp_path).returncode
    traces = read_jsonl(tmp_path / "jobs.traces.jsonl")
    assert 2 == len({record["run_id"] for record in traces})


def decimals(value: float) -> int:
    text = repr(value)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


def ms_fields(record: object, path: str = "") -> dict[str, list[float]]:
    """Every float under a key ending in ``_ms`` in a JSON record, by its dotted path."""
    found: dict[str, list[float]] = {}
    if isinstance(record, dict):
        for key, value in record.items():
            if key.endswith("_ms") and isinstance(value, float):
                found.setdefault(f"{path}.{key}", []).append(value)
            for name, values in ms_fields(value, f"{path}.{key}").items():
                found.setdefault(name, []).extend(values)
    elif isinstance(record, list):
        for item in record:
            for name, values in ms_fields(item, path).items():
                found.setdefault(name, []).extend(values)
    return found


def test_every_time_in_ms_has_three_decimals_at_most(tmp_path: Path):
    """A streamed run: every *_ms number of the results and the traces (ttft_ms included)
    has at most three decimals, as latency_ms has."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 30)
    result = rrcli("run", jobs, "-p", "demo", "--stream", cwd=tmp_path)
    assert 0 == result.returncode, result.stderr
    found: dict[str, list[float]] = {}
    for name in ("jobs.results.jsonl", "jobs.traces.jsonl"):
        for path, values in ms_fields(read_jsonl(tmp_path / name)).items():
            found.setdefault(path, []).extend(values)
    assert {".latency_ms", ".ttft_ms", ".queue_ms"} <= set(found)
    too_fine = {path: v for path, values in found.items() for v in values if decimals(v) > 3}
    assert {} == too_fine


def test_a_closed_output_stops_the_run_with_sigpipes_status(tmp_path):
    """`rrcli run … --out - | head -3`: once the reader is gone the run stops at once, says so
    on stderr, its run_end record says why (halted: output_closed), and it exits 141
    (128 + SIGPIPE, as a shell reports a program a broken pipe stopped); no traceback."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", 2000)
    run = popen("run", jobs, "-p", "demo", "--out", "-", cwd=tmp_path)
    head = [run.stdout.readline() for _ in range(3)]
    run.stdout.close()
    code = run.wait(timeout=60)
    stderr = run.stderr.read()
    assert 3 == len([line for line in head if json.loads(line)["status"] == "ok"])
    assert 141 == code
    assert "rrcli: the results output was closed (broken pipe) after " in stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    [end] = [r for r in read_jsonl(tmp_path / "jobs.traces.jsonl") if r["event"] == "run_end"]
    assert "output_closed" == end["halted"]
    assert end["jobs"]["ok"] < 2000


def test_the_readmes_quick_start_and_stats_examples_run(tmp_path):
    """The README's quick start twice (`run profiles/demo-jobs.jsonl -p demo --overwrite`),
    then its `rrcli stats demo-jobs.traces.jsonl` and `--plot`: one run of the demo's jobs
    read, every job ok, the plot a strip per backend."""
    demo = ROOT / "profiles" / "demo-jobs.jsonl"
    for _ in range(2):
        result = rrcli("run", demo, "-p", "demo", "--overwrite", cwd=tmp_path)
        assert 0 == result.returncode, result.stderr
    jobs = len([line for line in demo.read_text().splitlines() if line.strip()])
    table = rrcli("stats", "demo-jobs.traces.jsonl", cwd=tmp_path)
    assert 0 == table.returncode, table.stderr
    assert f"jobs: {jobs} ok · 0 error" in table.stdout
    assert "runs: 1 " in table.stdout
    plot = rrcli("stats", "demo-jobs.traces.jsonl", "--plot", cwd=tmp_path)
    assert 3 == len([line for line in plot.stdout.splitlines() if re.search(r" peak \d", line)])
