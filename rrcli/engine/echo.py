"""Where a streamed call's text goes as it arrives: ``--prompt --stream``'s printer, or the
callback of the job a program submitted (``Engine.submit``); once any text went out, the call is
neither retried nor moved."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from functools import partial

__all__ = ["REQUEST_TEXT", "Echo", "echo_for"]


class Echo:
    """--prompt --stream: text printed as it arrives; once any was, the call is never retried."""

    __slots__ = ("_out", "printed")

    def __init__(self, out: Callable[[str], None]) -> None:
        self._out = out
        self.printed = False

    def __call__(self, text: str) -> None:
        self.printed = True
        self._out(text)


#: the text callback of a job a program submitted (``Engine.submit``), set for the task that
#: awaits it (no parameter through every call): called with the deployment and each piece
REQUEST_TEXT: ContextVar[Callable[[str, str], None] | None] = ContextVar("rrcli_text", default=None)


def echo_for(stream: bool, on_text: Callable[[str], None] | None, deployment: str) -> Echo | None:
    """Where a streamed attempt's text goes: --prompt --stream's ``on_text``, else the
    submitted job's callback, told ``deployment``; None for a plain call or no reader."""
    if not stream:
        return None
    if on_text is not None:
        return Echo(on_text)
    request = REQUEST_TEXT.get()
    return None if request is None else Echo(partial(request, deployment))
