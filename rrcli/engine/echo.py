"""Where a streamed call's text goes as it arrives: ``--prompt --stream``'s printer, or the
reader a program passed with its job (``Engine.submit``); once any text went out, the call is
neither retried nor moved."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

__all__ = ["Echo", "OnText", "echo_for"]

#: a submitted job's reader of its stream: called with the deployment and each piece of text
OnText = Callable[[str, str], None]


class Echo:
    """Text handed on as it arrives; once any was, the call is never retried."""

    __slots__ = ("_out", "printed")

    def __init__(self, out: Callable[[str], None]) -> None:
        self._out = out
        self.printed = False

    def __call__(self, text: str) -> None:
        self.printed = True
        self._out(text)


def echo_for(
    printer: Callable[[str], None] | None, reader: OnText | None, deployment: str
) -> Echo | None:
    """Where a streamed attempt's text goes: --prompt --stream's ``printer``, else the
    submitted job's ``reader``, told ``deployment``; None when neither reads it."""
    if printer is not None:
        return Echo(printer)
    return None if reader is None else Echo(partial(reader, deployment))
