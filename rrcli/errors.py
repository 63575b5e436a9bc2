"""rrcli's exceptions, in one tree.

Every error a user can see is an ``RRCLIError``; each class knows the exit code the CLI returns for
it (1 some jobs failed or a profile had errors, 2 usage error or unusable profile, 130
interrupted)::

    RRCLIError                      exit 1
    ├── UsageError                  exit 2: bad options, missing files; nothing was sent
    │   ├── ProfileError            the profile cannot be used (carries every diagnostic)
    │   ├── OutputExistsError       results file exists without --resume/--overwrite
    │   ├── OutputBusyError         another run holds the results or traces file
    │   ├── GateUnavailableError    the shared gate (Redis) cannot be reached at start
    │   ├── CacheError              the response cache file cannot be used (corrupt, foreign...)
    │   └── NoBackendError          routing found no backend the call may use (failover tried all)
    │       └── NoHealthyBackend    every backend of the pool is down: the run has halted
    ├── CallError                   a program's call through the pool (rrcli.Pool) got no answer
    ├── EngineClosed                the engine was closed before a call was sent: it never was
    ├── QueueLostError              the shared queue's keys vanished while workers ran
    ├── QueueFullError              Redis refused a queue write for want of memory
    └── ProviderError               one HTTP attempt failed; translated ONCE in providers/base.py
        ├── TransportError          connection refused/reset, DNS, TLS: no response at all
        │   └── TimeoutError_       the attempt's timeout passed
        ├── StatusError             the server answered with a non-2xx status
        ├── InvalidResponseError    a 2xx body that is not a valid response
        ├── StreamBrokenError       a stream that ended before it completed
        ├── ResponseTooLargeError   a body past the backend's max_response_bytes
        ├── RedirectError           a 3xx: never followed (credentials would travel with it)
        ├── UntranslatableError     the request cannot be written in the backend's API: not sent
        └── Cancelled               the call was cancelled while it was sent (traced, then raised)

Retryability is a property of the error (``transient``, ``retry_after``), decided where the error
is made, so the runner has no if-chain of statuses (httpx's ``_exceptions.py`` draws its tree the
same way).

Two more trees hold what rrcli raises and catches itself. None is an ``RRCLIError``, so ``except
RRCLIError`` never stops one on its way, and none reaches a user as an exception::

    ControlSignal                   a call's course changes: caught by the part that drives it
    ├── Halted                      a halted run refuses to start an attempt (job left unfinished)
    ├── Unaffordable                an attempt's worst case alone passes the whole budget
    ├── WaitEnded                   a wait for a gate slot ended holding nothing: choose again
    ├── BackendDown                 a retry's backend left the pool while it waited: route again
    └── RedisDown                   one Redis step could not reach Redis (the hub decides what next)

    BadInput                        an input at fault, answered as data where it was read
    ├── LineError                   a jobs line's fault: the job is written as invalid
    └── InvalidSimRequest           a request `rrcli sim` refuses: its 400 body
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from asyncio import CancelledError

    from rrcli.diagnostic import Diagnostic

__all__ = [
    "BackendDown",
    "BadInput",
    "CacheError",
    "CallError",
    "Cancelled",
    "ControlSignal",
    "EngineClosed",
    "GateUnavailableError",
    "Halted",
    "InvalidResponseError",
    "InvalidSimRequest",
    "LineError",
    "NoBackendError",
    "NoHealthyBackend",
    "OutputBusyError",
    "OutputExistsError",
    "ProfileError",
    "ProviderError",
    "QueueFullError",
    "QueueLostError",
    "RRCLIError",
    "RedirectError",
    "RedisDown",
    "ResponseTooLargeError",
    "StatusError",
    "StreamBrokenError",
    "TimeoutError_",
    "TransportError",
    "Unaffordable",
    "UntranslatableError",
    "UsageError",
    "WaitEnded",
]


class RRCLIError(Exception):
    """Base of every error rrcli reports to a user."""

    exit_code: ClassVar[int] = 1


class UsageError(RRCLIError):
    """The command cannot start: bad options, a missing file. Nothing was sent."""

    exit_code: ClassVar[int] = 2


class ProfileError(UsageError):
    """The profile has errors; ``diagnostics`` holds every one of them, not only the first."""

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.diagnostics = tuple(diagnostics)


class OutputExistsError(UsageError):
    """The results file exists and neither --resume nor --overwrite was given."""


class OutputBusyError(UsageError):
    """Another run holds the lock on this run's results or traces file."""


class GateUnavailableError(UsageError):
    """The shared gate's server (Redis) cannot be reached when the run starts."""


class CacheError(UsageError):
    """The response cache file (``--cache``) cannot be used as asked: not an SQLite database,
    corrupt, another program's database, or read-only while answers would be stored."""


class NoBackendError(UsageError):
    """A routing decision found no backend the call may use: every one was excluded (failover
    already tried them all) or none can be chosen (weighted with weight 0). The runner makes it
    the job's final error."""


class NoHealthyBackend(NoBackendError):
    """Every backend of the pool is down: the run has halted, and a call that could not be
    routed leaves its job without a result line (``--resume`` runs it once fixed)."""


class CallError(RRCLIError):
    """A call a program made through the pool (``rrcli.Pool``) that ended without an answer.

    ``result`` is the record its result line holds (``status`` ``error`` or ``invalid``, its
    ``error``, ``deployment`` and ``attempts``); ``type`` the error's type: the backend's
    (``http_429``, ``timeout``...), ``invalid_job`` for a request no backend can take as
    written, ``budget`` once the pool's budget is spent, ``no_healthy_backend`` when no backend
    is left, ``closed`` when the pool was closed before the call was sent (it never was) or
    while it was in flight past the close's timeout (it was cancelled). ``status_code``: the
    status the backend answered, when it answered one;
    ``retry_after``: the seconds the backend asked to wait, or None."""

    def __init__(
        self,
        message: str,
        *,
        type: str,
        result: dict[str, object],
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.type = type
        self.result = result
        self.status_code = status_code
        self.retry_after = retry_after


class EngineClosed(RRCLIError):
    """The engine was closed (``Engine.stop_sending``) before the call's next attempt was sent:
    that attempt never is (a pool makes it a ``CallError`` of type ``closed``). ``attempts``:
    the call's attempts sent before (a retry's), 0 for a call never sent."""

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class QueueLostError(RRCLIError):
    """The queue's keys vanished while workers ran (Redis restarted without persistence)."""


class QueueFullError(RRCLIError):
    """Redis refused a write for want of memory (its ``maxmemory`` reached, nothing evicted):
    ``what`` says so, ``advice`` what to do while workers run."""

    def __init__(self, what: str, advice: str) -> None:
        super().__init__(f"{what} — {advice}")
        self.what = what


class ProviderError(RRCLIError):
    """One HTTP attempt failed.

    ``type`` is the stable machine name written to results and traces (``http_503``,
    ``connect_error``, ``timeout``, ``invalid_response``, ``stream_broken``, ``redirect``,
    ``insufficient_quota``, ``context_length_exceeded``, ``overloaded_error``...).
    ``transient``: another attempt on the same backend may succeed. ``retry_after``: seconds the
    server asked us to wait, or None. ``rate_limited``: the failure is the server saying "too
    much load" (429/529): adaptive caps and cooldowns react to it. ``body``: the server's error
    body as text, the key masked and cut to 2 KB (``providers.base.error_body``), or None.
    ``backend_down``: the answer says the backend can serve no call at all (its key refused, its
    account out of quota, its model or path not found), not that this call failed: the run
    takes the backend out of its pool.
    """

    def __init__(
        self,
        message: str,
        *,
        type: str,
        transient: bool,
        status_code: int | None = None,
        retry_after: float | None = None,
        rate_limited: bool = False,
        body: str | None = None,
        backend_down: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.type = type
        self.transient = transient
        self.status_code = status_code
        self.retry_after = retry_after
        self.rate_limited = rate_limited
        self.body = body
        self.backend_down = backend_down

    def as_dict(self) -> dict[str, object]:
        """The ``error`` object of a result line, with ``body`` when the server sent
        one."""
        error: dict[str, object] = {
            "type": self.type,
            "message": self.message,
            "status_code": self.status_code,
            "retryable": self.transient,
        }
        if self.body is not None:
            error["body"] = self.body
        return error


class TransportError(ProviderError):
    """No response at all: connection refused or reset, DNS failure, TLS failure."""


class TimeoutError_(TransportError):  # the builtin name is taken
    """The attempt's timeout passed before the response completed."""


class ResponseTooLargeError(ProviderError):
    """The body passed the backend's ``max_response_bytes`` (decompressed): never retried."""


class StatusError(ProviderError):
    """The server answered with a non-2xx status."""


class InvalidResponseError(ProviderError):
    """A 2xx response whose body is not a valid response of the provider's API."""


class StreamBrokenError(ProviderError):
    """A streamed response that ended before it completed."""


class RedirectError(ProviderError):
    """A 3xx: never followed, since credentials would travel with it to another origin."""


class UntranslatableError(ProviderError):
    """A job's content has no form in the routed backend's API (a tool call's ``arguments`` that
    are not JSON, a content block the other API has no counterpart for): nothing was sent, and
    no other attempt would do better."""

    def __init__(self, message: str) -> None:
        super().__init__(message, type="untranslatable", transient=False)


class Cancelled(ProviderError):
    """A call cancelled while it was sent (its client left, a second Ctrl-C): its attempt is
    traced ``cancelled``, then ``cancel`` is raised again. ``type`` is the reason the canceller
    gave (``Task.cancel(msg)``, such as ``client_disconnected``), else ``cancelled``."""

    def __init__(self, cancel: CancelledError) -> None:
        given = cancel.args[0] if cancel.args else None
        reason = given if type(given) is str and given else "cancelled"
        super().__init__(f"the call was cancelled: {reason}", type=reason, transient=False)
        self.cancel = cancel


class ControlSignal(Exception):
    """Base of the exceptions that change a call's course inside rrcli: raised by one part,
    caught by the part that drives the call, never shown to a user as an exception."""


class Halted(ControlSignal):
    """Raised where a halted run refuses to start an attempt (the budget would pass): the job
    ends without a result line, so ``--resume`` runs it. ``reason``: the halt's (``budget``,
    ...; ``budget`` too for one attempt refused before the run halts), ``said``: what happened
    in words any front-end may use; ``retry_after``: seconds until the refusal ends by itself
    (a budget's period renewed), None when nothing but a change ends it."""

    def __init__(self, reason: str, said: str, retry_after: float | None = None) -> None:
        super().__init__(said)
        self.reason = reason
        self.said = said
        self.retry_after = retry_after  # seconds until a budget's period renews it


class Unaffordable(ControlSignal):
    """An attempt whose worst case alone passes the whole limit: no wait makes room for it, so
    its job is refused before anything is sent (an invalid line; the message names the fix)."""


class WaitEnded(ControlSignal):
    """A wait for a slot ended holding nothing: the gate sent its waiters away
    (``wake_waiters``), as when the backend they wait for leaves the pool. They choose again."""


class BackendDown(ControlSignal):
    """The backend a retry waited for went down meanwhile: the call is routed again."""


class RedisDown(ControlSignal):
    """Redis could not be reached for one step (translated once, in ``fleet._hub.Hub.guarded``)."""


class BadInput(Exception):
    """Base of the faults found in an input where it is read and answered there as data (an
    invalid result line, an error body), never shown to a user as an exception."""


class LineError(BadInput):
    """A jobs line's fault; the message names the field and the fix."""


class InvalidSimRequest(BadInput):
    """A request a `rrcli sim` endpoint refuses with a 400: the message, the parameter at fault
    and the error code, as the API's error body carries them."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code
