"""What `rrcli run` logs, by its flags: one function decides the level."""

from __future__ import annotations

import re

import pytest

from rrcli._logging import log_level


@pytest.mark.parametrize(
    ("verbose", "quiet", "tty", "level"),
    [
        (False, False, False, "info"),
        (False, False, True, "warning"),
        (True, False, False, "debug"),
        (True, False, True, "debug"),
        (False, True, False, "error"),
        (True, True, True, "error"),
    ],
)
def test_log_level(verbose, quiet, tty, level):
    """-q shows errors only (and wins over -v); -v shows debug events; otherwise warnings show
    on a terminal and info lines too when not on one."""
    assert level == log_level(verbose=verbose, quiet=quiet, tty=tty)


DISPLAY_SCRIPT = """
import random, time
from rrcli import _render
from rrcli._logging import configure_logging, log_level
from rrcli.logs import get_logger
from rrcli.config.load import demo_profile_path, load_profile
from rrcli.engine.engine import RunSummary
from rrcli.engine.assembly import make_router
from rrcli.routing.control import RunControl
from rrcli.routing.status import status_of

configure_logging(level=log_level(verbose=False, quiet=False, tty=True))
router, _ = make_router(load_profile(demo_profile_path(), environ={}), random.Random(0), local=True)
log = get_logger("rrcli")
with _render.RunDisplay(enabled=True) as display:
    display.start(RunSummary("r"), lambda: status_of(router.states, {}, None, RunControl()))
    time.sleep(0.3)
    log.warning("rrcli.job_failed", job="j1")
    log.info("rrcli.not_shown")
    time.sleep(0.3)
"""


def test_a_warning_prints_above_the_live_display_on_a_terminal():
    """On a terminal the live display owns stderr; a warning still shows (printed above the
    display, which is drawn again under it), and info lines stay hidden."""
    import os
    import pty
    import subprocess
    import sys

    from runkit import ROOT

    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "NO_COLOR": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", DISPLAY_SCRIPT], stderr=follower, stdout=follower, env=env
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the child
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert 0 == child.wait(timeout=30)
    text = output.decode(errors="replace")
    warning_at = text.index("rrcli.job_failed")
    line = text[text.rindex("\n", 0, warning_at) + 1 : warning_at]
    on_screen = line.rsplit("\x1b[2K", 1)[-1]  # what the line shows once the display is erased
    assert re.fullmatch(r"\S+Z \[warning\s*\] ", on_screen), repr(line)
    assert "jobs 0" in text[:warning_at] and "jobs 0" in text[warning_at:]
    assert "rrcli.not_shown" not in text
