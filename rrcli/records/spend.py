"""What earlier runs spent, read back from a trace file (a budget with ``--resume``
covers the earlier runs of the same results file: those whose run record names it), and what
their calls wrote (``--dry-run``'s likely cost: ``earlier_outputs``).

Each call record costs what it was charged (``cost_usd``: the reservation of an attempt whose
usage was unknown, so a resumed budget counts what the live one did); a record without it
(written by an older rrcli, or of a deployment its run left unpriced) costs its tokens at the
price its run record gives its deployment (USD per million tokens), else at what ``fallback``
(today's prices) says, else nothing. An answer from the response cache (outcome ``cached``)
made no call and costs nothing. Streamed line by line; a line that is not a trace record is
skipped, as ``rrcli stats`` skips it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import orjson

from rrcli.config.profile import Price
from rrcli.records.traceschema import MAX_CALL_COST_USD, same_results

__all__ = ["Outputs", "earlier_outputs", "traces_cost"]

#: by deployment id: (ok calls, the output tokens they wrote)
Outputs = dict[str, tuple[int, int]]
_NO_CALLS = 1 << 32  # an output count this large is no call's


def traces_cost(
    path: Path | None, fallback: Mapping[str, Price | None], results: Path | None = None
) -> float:
    """USD spent by the call records of ``path`` (0.0 when it does not exist); with
    ``results``, only by the runs that wrote that results file (a run record without a
    ``results`` field, written by an older rrcli, counts: it may have)."""
    if path is None or not path.is_file():
        return 0.0
    prices: dict[tuple[str, str], tuple[float, float]] = {}
    others: set[object] = set()  # the runs that wrote another results file
    total = 0.0
    with open(path, "rb") as lines:
        for record in _records(lines):
            if record.get("event") == "run":
                prices.update(_run_prices(record))
                if (
                    results is not None
                    and "results" in record
                    and not same_results(record["results"], path, results)
                ):
                    others.add(record.get("run_id"))
            elif (
                record.get("event") == "call"
                and record.get("outcome") != "cached"
                and record.get("run_id") not in others
            ):
                charged = record.get("cost_usd")
                if type(charged) in (int, float) and 0 <= charged < MAX_CALL_COST_USD:
                    total += charged * 1e6
                    continue
                price = prices.get((record.get("run_id"), record.get("deployment")))
                if price is None:
                    fell = fallback.get(record.get("deployment"))  # type: ignore[arg-type]
                    price = (0.0, 0.0) if fell is None else (fell.input, fell.output)
                total += _tokens(record, "input_tokens") * price[0]
                total += _tokens(record, "output_tokens") * price[1]
    return total / 1e6


def earlier_outputs(path: Path | None, profile: str | None) -> Outputs:
    """What the ok calls of ``path`` wrote, by deployment, counting only the runs of the
    profile named ``profile`` (its run record's ``profile.name``; None: an unnamed profile's
    runs); empty when the file does not exist. A call answered from the response cache, or
    with no output count, is not counted."""
    found: Outputs = {}
    if path is None or not path.is_file():
        return found
    runs: set[object] = set()
    with open(path, "rb") as lines:
        for record in _records(lines):
            event = record.get("event")
            if event == "run" and (record.get("profile") or {}).get("name") == profile:
                runs.add(record.get("run_id"))
            elif event == "call" and record.get("outcome") == "ok":
                wrote = record.get("output_tokens")
                if record.get("run_id") in runs and type(wrote) is int and 0 <= wrote < _NO_CALLS:
                    calls, total = found.get(deployment := str(record.get("deployment")), (0, 0))
                    found[deployment] = (calls + 1, total + wrote)
    return found


def _records(lines: Iterable[bytes]) -> Iterator[dict]:
    """The trace records of ``lines``: a line that is not one is skipped."""
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if type(record) is dict:
            yield record


def _run_prices(record: dict) -> Iterator[tuple[tuple[str, str], tuple[float, float]]]:
    """``{(run id, deployment): (input, output)}`` from a run record's priced backends."""
    run_id = record.get("run_id")
    backends = (record.get("profile") or {}).get("backends") or []
    for backend in backends:
        if type(backend) is not dict:
            continue
        price = backend.get("price")
        if type(price) is dict:
            yield (run_id, backend.get("id")), (_num(price, "input"), _num(price, "output"))


def _num(record: dict, name: str) -> float:
    value = record.get(name)
    return float(value) if type(value) in (int, float) else 0.0


def _tokens(record: dict, name: str) -> float:
    value = record.get(name)
    return float(value) if type(value) is int and value > 0 else 0.0
