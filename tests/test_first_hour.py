"""What a new user tripped on in their first hour with `run`, `validate` and `stats`, each
checked through the CLI as they met it."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import subprocess
import sys

import httpx2
import orjson
import pytest
from click.testing import CliRunner
from runkit import ROOT, Terminal, read_jsonl, rrcli, write_jobs, write_profile
from screens import plain, stats_traces

from rrcli import Pool, PoolTransport, UsageError
from rrcli.cli import main
from rrcli.stats.cells import COLUMNS

try:
    import openai
except ImportError:  # the sync client is then a bare httpx2.Client
    openai = None
HI = [{"role": "user", "content": "Hi"}]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: a deployment's row of the live display: ok calls, retried, errors
ROW = re.compile(r"^(alpha|beta) +\d+ / [^ ]+(?: \(max \d+\))? +([\d,]+) +([\d,]+) +([\d,]+)", re.M)

PRICE = {"input": 4.0, "output": 8.0}  # USD per million tokens: a job costs about $0.0001


def _jobs(path, n):
    lines = (
        orjson.dumps({"id": f"j{i}", "prompt": f"question {i}", "params": {"max_tokens": 20}})
        for i in range(n)
    )
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _summary(stderr):
    """The closing line's counts: {"ok": 23, "error": 0, "invalid": 0, "skipped": 27}."""
    found = re.search(r"(\d+) ok, (\d+) error, (\d+) invalid, (\d+) skipped", stderr)
    assert found is not None, stderr
    return dict(zip(("ok", "error", "invalid", "skipped"), map(int, found.groups()), strict=True))


def _spend(traces, run_ids):
    """USD the call records of the runs ``run_ids`` were charged."""
    calls = (r for r in read_jsonl(traces) if r["event"] == "call" and r["run_id"] in run_ids)
    return sum(r["cost_usd"] for r in calls)


def test_a_resumed_budget_counts_only_its_results_files_spend(tmp_path, sim_server):
    """Three runs sharing the default traces file (named after the jobs file): all of
    small.jsonl, then `--out b.jsonl --max-cost 0.003` (exit 3), then `--out b.jsonl --max-cost
    0.006 --resume`: the resumed run counts b.jsonl's calls only (the first run's spend is not
    b.jsonl's), so it goes on where the first b run stopped, and each run record names the
    results file it wrote."""
    server = sim_server(output_tokens=10, seed=1)
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "s", "base_url": server.openai_url, "price": PRICE}]
    )
    _jobs(tmp_path / "small.jsonl", 50)
    assert 0 == rrcli("run", "small.jsonl", "-p", profile, "-q", cwd=tmp_path).returncode
    first = rrcli(
        "run",
        "small.jsonl",
        "-p",
        profile,
        "-q",
        "--out",
        "b.jsonl",
        "--max-cost",
        "0.003",
        cwd=tmp_path,
    )
    assert 3 == first.returncode, first.stderr
    held = len(read_jsonl(tmp_path / "b.jsonl"))
    again = rrcli(
        "run",
        "small.jsonl",
        "-p",
        profile,
        "--out",
        "b.jsonl",
        "--max-cost",
        "0.006",
        "--resume",
        cwd=tmp_path,
    )
    assert 0 == again.returncode, again.stderr
    traces = tmp_path / "small.traces.jsonl"
    runs = [r for r in read_jsonl(traces) if r["event"] == "run"]
    assert ["small.results.jsonl", "b.jsonl", "b.jsonl"] == [r["results"] for r in runs]
    small, b_runs = {runs[0]["run_id"]}, {runs[1]["run_id"], runs[2]["run_id"]}
    assert _spend(traces, small) > 0.004
    (end,) = [r for r in read_jsonl(traces) if r["event"] == "run_end"][-1:]
    assert round(_spend(traces, b_runs), 6) == end["budget"]["spent"]
    assert {"ok": 50 - held, "error": 0, "invalid": 0, "skipped": held} == _summary(again.stderr)
    assert 50 == len(read_jsonl(tmp_path / "b.jsonl"))


def test_a_halted_resume_counts_every_job_its_results_file_holds(tmp_path, sim_server):
    """A resumed run that reaches its budget reports as skipped every job the results file
    holds, those past where it stopped too, and as not run only the jobs left without a
    result: ok + skipped is what the file holds."""
    server = sim_server(output_tokens=10, seed=1)
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "s", "base_url": server.openai_url, "price": PRICE}]
    )
    _jobs(tmp_path / "small.jsonl", 50)
    odd = [
        line for i, line in enumerate((tmp_path / "small.jsonl").read_bytes().splitlines()) if i % 2
    ]
    (tmp_path / "odd.jsonl").write_bytes(b"\n".join(odd) + b"\n")
    assert (
        0
        == rrcli(
            "run", "odd.jsonl", "-p", profile, "-q", "--out", "b.jsonl", cwd=tmp_path
        ).returncode
    )
    again = rrcli(
        "run",
        "small.jsonl",
        "-p",
        profile,
        "--out",
        "b.jsonl",
        "--max-cost",
        "0.001",
        "--resume",
        cwd=tmp_path,
    )
    assert 3 == again.returncode, again.stderr
    held = len(read_jsonl(tmp_path / "b.jsonl"))
    counts = _summary(again.stderr)
    assert {"ok": held - 25, "error": 0, "invalid": 0, "skipped": 25} == counts
    assert f"; {50 - held} jobs not run" in again.stderr


AUDITED = """
import sys

def hook(event, args):
    if event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.connect"):
        print("network:", event, args[0], file=sys.stderr)

sys.addaudithook(hook)
from rrcli.cli import main
main(sys.argv[1:])
"""


def test_validate_without_probe_makes_no_lookup(tmp_path):
    """`rrcli validate` on a profile of real providers' hosts asks no resolver and opens no
    connection (an audit hook sees every getaddrinfo and connect), and warns of no host that
    did not resolve; `--probe` is what reaches the network."""
    write_profile(
        tmp_path / "p.toml",
        [
            {
                "id": "a",
                "base_url": "https://api.openai.com/v1",
                "credentials": {"api_key_env": "K"},
            },
            {
                "id": "b",
                "base_url": "https://no-such-host.invalid/v1",
                "credentials": {"api_key_env": "K"},
            },
        ],
    )
    done = subprocess.run(
        [sys.executable, "-c", AUDITED, "validate", "p.toml"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "K": "sk-test"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 0 == done.returncode, done.stderr
    assert "" == done.stderr
    assert "did not resolve" not in done.stdout


def test_init_names_the_key_variables_left_to_export(tmp_path):
    """`rrcli init` says which key variables are unset and that they are the only thing left;
    `validate` then fails on exactly those, and passes once they are exported."""
    path = tmp_path / "rrcli.toml"
    unset = {"OPENAI_API_KEY_1": None, "OPENAI_API_KEY_2": None, "OPENAI_API_KEY_3": "sk-x"}
    runner = CliRunner()
    done = runner.invoke(main, ["init", str(path)], env=unset)
    assert 0 == done.exit_code, done.output
    expected = (
        f"wrote {path} (3 openai backends); the only thing left: export OPENAI_API_KEY_1, "
        f"OPENAI_API_KEY_2 (unset now; one key per backend), then: rrcli validate {path}\n"
    )
    assert expected == done.output
    checked = runner.invoke(main, ["validate", str(path)], env=unset)
    assert 1 == checked.exit_code
    unset_named = re.findall(r"variable (\w+) is not set", checked.output)
    assert ["OPENAI_API_KEY_1", "OPENAI_API_KEY_2"] == unset_named
    keys = {"OPENAI_API_KEY_1": "sk-a", "OPENAI_API_KEY_2": "sk-b", "OPENAI_API_KEY_3": "sk-c"}
    assert 0 == runner.invoke(main, ["validate", str(path)], env=keys).exit_code


def test_a_sync_client_over_pool_transport_is_told_to_use_the_async_one(tmp_path, sim_server):
    """The sync OpenAI SDK (else a bare httpx2.Client) over rrcli.PoolTransport: a UsageError
    naming the async client and `rrcli serve`, not an AttributeError; nothing is sent. A sync
    client opened with `with` over it is refused as it opens."""
    server = sim_server()
    path = write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])

    async def opened():
        pool = Pool.from_profile(path)
        await pool.__aenter__()
        return pool

    pool = asyncio.run(opened())
    try:
        http = httpx2.Client(transport=PoolTransport(pool))
        with pytest.raises(UsageError) as refused:
            if openai is None:
                http.post("http://pool/v1/chat/completions", json={"model": "p", "messages": HI})
            else:
                client = openai.OpenAI(base_url="http://pool/v1", api_key="-", http_client=http)
                client.with_options(max_retries=0).chat.completions.create(model="p", messages=HI)
        with pytest.raises(UsageError) as opened_sync, httpx2.Client(transport=PoolTransport(pool)):
            pass
    finally:
        asyncio.run(pool.__aexit__(None, None, None))
    expected = (
        "rrcli.PoolTransport serves async clients only: use httpx2.AsyncClient (and "
        "openai.AsyncOpenAI or anthropic.AsyncAnthropic over it), or run rrcli serve and point "
        "the sync client's base_url at it"
    )
    assert (expected, expected) == (str(refused.value), str(opened_sync.value))
    assert 0 == server.stats()["requests"]


def test_a_small_budget_is_printed_with_the_figures_it_needs(tmp_path, sim_server):
    """A $0.003 budget: the halt says `budget reached: $0.0029 of $0.003 spent` (two
    significant figures, never $0.00 of $0.00), and `rrcli stats` gives the cost so too."""
    server = sim_server(output_tokens=10, seed=1)
    profile = write_profile(
        tmp_path / "p.toml", [{"id": "s", "base_url": server.openai_url, "price": PRICE}]
    )
    _jobs(tmp_path / "small.jsonl", 50)
    done = rrcli("run", "small.jsonl", "-p", profile, "-q", "--max-cost", "0.003", cwd=tmp_path)
    assert 3 == done.returncode, done.stderr
    (end,) = [r for r in read_jsonl(tmp_path / "small.traces.jsonl") if r["event"] == "run_end"]
    spent = end["budget"]["spent"]
    assert 0.001 < spent < 0.003
    assert f"rrcli: budget reached: ${spent:.2g} of $0.003 spent;" in done.stderr
    stats = rrcli("stats", "small.traces.jsonl", cwd=tmp_path, env={"COLUMNS": "160"})
    assert 0 == stats.returncode, stats.stderr
    assert f"cost {spent:.2g} (100 % of calls priced)" in stats.stdout


def test_the_live_displays_counts_only_grow(tmp_path, sim_server):
    """Frames of a run's live display, on backends failing a third of their calls and
    retrying after a pause long enough to be seen: each deployment's ok calls, retried and
    errors never go down from one frame to the next, and the columns say what they count."""
    servers = [sim_server(latency_ms=20, error_rate=0.35, seed=i) for i in range(2)]
    backends = [
        {"id": name, "base_url": s.openai_url, "max_concurrency": 2}
        for name, s in zip(("alpha", "beta"), servers, strict=True)
    ]
    retry = {"max_retries": 1, "backoff_initial": 0.3, "backoff_max": 0.3}
    profile = write_profile(tmp_path / "p.toml", backends, retry=retry)
    write_jobs(tmp_path / "jobs.jsonl", 60)
    terminal = Terminal("run", "jobs.jsonl", "-p", profile, cwd=tmp_path)
    assert terminal.finish() in (0, 1), ANSI.sub("", terminal.text)
    screen = ANSI.sub("", terminal.text)
    assert "deployment  in flight / cap  ok calls  retried  errors" in screen
    frames: dict[str, list[tuple[int, ...]]] = {"alpha": [], "beta": []}
    for found in ROW.finditer(screen):
        frames[found[1]].append(tuple(int(n.replace(",", "")) for n in found.groups()[1:]))
    for name, rows in frames.items():
        assert len(rows) > 4, screen
        pairs = itertools.pairwise(rows)
        shrunk = [(a, b) for a, b in pairs if any(x > y for x, y in zip(a, b, strict=True))]
        assert [] == shrunk, name
    last = [rows[-1] for rows in frames.values()]
    assert all(row[1] + row[2] > 0 for row in last)  # each deployment saw failed attempts
    assert sum(row[2] for row in last) > 0  # and some job ended in an error


@pytest.mark.parametrize("width", [80, 160])
def test_stats_wide_rows_are_never_wrapped(tmp_path, width):
    """`rrcli stats --wide` on a terminal of 80 and 160 columns: no line is wider than the
    terminal (so none wraps), every column is shown whole (its head's words intact), and each
    deployment's row is one line in every table it is in."""
    stats_traces(tmp_path)
    terminal = Terminal(
        "stats", "jobs.traces.jsonl", "--wide", cwd=tmp_path, env={"COLUMNS": str(width)}
    )
    assert 0 == terminal.finish()
    screen = plain(terminal.text)
    assert [] == [line for line in screen.splitlines() if len(line) > width]
    heads = [word for column in COLUMNS for word in column.head.split()]
    assert [] == [
        word for word in heads if not re.search(rf"(?<!\S){re.escape(word)}(?!\S)", screen)
    ]
    tables = screen.count("deployment ")
    for name in ("local-vllm", "openai-a", "openai-b"):
        rows = [line for line in screen.splitlines() if line.startswith(name)]
        assert tables == len(rows)
        assert all(
            re.fullmatch(rf"{name}( +[-\d.,%]+(?: \(\d+ % priced\))?)+", row) for row in rows
        ), rows


@pytest.mark.parametrize("width", [80, 160])
def test_validate_never_cuts_a_word(tmp_path, width):
    """`rrcli validate` on a terminal of 80 and 160 columns: every word of every diagnostic
    (its place, problem and fix, as --json gives them) is on the screen whole, and no line is
    wider than the terminal (but for the one naming the profile, whose path is one long word)."""
    (tmp_path / "p.toml").write_text(
        "[defaults]\nmax_concurrency = 0\n"
        '[[backends]]\nid = "a"\nprovider = "openai"\nmodel = "gpt-4o-mini"\n'
        'credentials = { api_key_env = "FIRST_HOUR_UNSET_KEY" }\n'
        '[[backends]]\nid = "b"\nprovider = "openai"\nmodel = "gpt-4o-mini"\n'
        'base_url = "http://10.0.0.1/v1"\ncredentials = { api_key_env = "FIRST_HOUR_UNSET_KEY" }\n'
    )
    report = orjson.loads(rrcli("validate", "p.toml", "--json", cwd=tmp_path).stdout)
    diagnostics = report["errors"] + report["warnings"]
    assert 4 <= len(diagnostics)
    terminal = Terminal("validate", "p.toml", cwd=tmp_path, env={"COLUMNS": str(width)})
    assert 1 == terminal.finish()
    screen = plain(terminal.text)
    lines = [line for line in screen.splitlines() if "p.toml" not in line]  # a path is one word
    assert [] == [line for line in lines if len(line) > width]
    places = [part for d in diagnostics for part in re.split(r"(?<=\])\.", d["path"])]
    texts = [*places, *(d[key] for d in diagnostics for key in ("message", "fix"))]
    assert [] == sorted({word for text in texts for word in text.split() if word not in screen})
