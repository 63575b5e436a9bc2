"""This tree against another git revision: whole `rrcli run` processes, interleaved.

The revision is installed into a temporary venv (``git archive`` of it, ``pip install --no-deps``
into a venv that sees this interpreter's packages), so only its command line is used and its
package layout does not matter; this working tree is installed the same way into a second venv,
so both start from compiled bytecode. Each side runs as a child process; its wall time is taken from
start to exit, its CPU time and peak RSS from the kernel's resource usage of that child
(``os.wait4``). On a shared machine the wall time moves with the other processes' load; the CPU
ratio, printed beside it, moves less.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, write_jobs

PROFILE = """\
name = "engine"
concurrency = 64

[defaults]
provider = "sim"
model = "sim"

{backends}"""

BACKEND = """\
[[backends]]
id = "sim-{i}"
max_concurrency = 64
sim = {{ latency_ms = 0 }}
"""


def install(rev: str | None, tmp: Path) -> Path:
    """Installs ``rev`` of this repository (None: this working tree, uncommitted changes
    included) into a venv under ``tmp``; the venv's python. Both sides are installed the same
    way, so both start from the bytecode pip compiles (a tree run from its sources under
    PYTHONDONTWRITEBYTECODE compiles every module at each start)."""
    tmp.mkdir()
    src, venv = tmp / "src", tmp / "venv"
    src.mkdir()
    if rev is None:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
            check=True, capture_output=True, text=True,
        ).stdout.split("\0")  # fmt: skip
        for name in filter(None, listed):
            if (ROOT / name).is_file():
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, src / name)
    else:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(src)],
        check=True,
    )
    where = subprocess.run(
        [str(python), "-c", "import rrcli; print(rrcli.__file__)"],
        cwd=tmp, env=child_env(), check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    if not where.startswith(str(venv)):
        sys.exit(f"the venv imports rrcli from {where.strip()}, not from its own install")
    return python


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def timed_run(
    python: Path, env: dict[str, str], jobs: Path, n: int, tmp: Path
) -> tuple[float, float, float]:
    """One whole `rrcli run` of ``jobs``; its wall seconds, CPU seconds and peak RSS in MB."""
    out, traces = tmp / "r.jsonl", tmp / "t.jsonl"
    out.unlink(missing_ok=True)
    traces.unlink(missing_ok=True)
    argv = [str(python), "-m", "rrcli", "run", str(jobs), "-p", str(tmp / "engine.toml"), "-q",
            "--out", str(out), "--traces", str(traces)]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}")
    with open(out, "rb") as f:
        lines = sum(1 for _ in f)
    if lines != n:
        sys.exit(f"{' '.join(argv)} wrote {lines} results, not {n}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def against(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench_engine.py --against")
    parser.add_argument("rev")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        sides = {
            args.rev: (install(args.rev, tmp / "rev"), child_env()),
            "this tree": (install(None, tmp / "tree"), child_env()),
        }
        jobs = write_jobs(tmp / "jobs.jsonl", args.jobs)
        backends = "\n".join(BACKEND.format(i=i) for i in range(3))
        (tmp / "engine.toml").write_text(PROFILE.format(backends=backends))
        print(f"{args.jobs:,} jobs, 3 sim backends at 0 ms, 64 in flight; load {load()}")
        times: dict[str, list[float]] = {name: [] for name in sides}
        peaks: dict[str, list[float]] = {name: [] for name in sides}
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        ratios = []
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for name in order:
                seconds, used, peak = timed_run(*sides[name], jobs, args.jobs, tmp)
                times[name].append(seconds)
                cpu[name].append(used)
                peaks[name].append(peak)
            ratios.append(times["this tree"][-1] / times[args.rev][-1])
            print(
                f"round {r + 1}: {args.rev} {times[args.rev][-1]:.2f} s "
                f"({peaks[args.rev][-1]:.0f} MB) | this tree {times['this tree'][-1]:.2f} s "
                f"({peaks['this tree'][-1]:.0f} MB) | ratio {ratios[-1]:.3f} "
                f"(CPU {cpu['this tree'][-1] / cpu[args.rev][-1]:.3f}) | load {load()}",
                flush=True,
            )
        rss = max(peaks["this tree"]) / max(peaks[args.rev])
        cpu_ratio = statistics.median(
            a / b for a, b in zip(cpu["this tree"], cpu[args.rev], strict=True)
        )
        print(
            f"median ratio this tree / {args.rev}: {statistics.median(ratios):.3f} "
            f"(time per run {statistics.median(times['this tree']):.2f} s against "
            f"{statistics.median(times[args.rev]):.2f} s; CPU {cpu_ratio:.3f}); "
            f"peak RSS {max(peaks['this tree']):.0f} MB against {max(peaks[args.rev]):.0f} MB "
            f"(ratio {rss:.2f}); load {load()}"
        )
