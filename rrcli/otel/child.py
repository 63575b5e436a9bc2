"""The span process of ``rrcli run --otlp``: ``python -m rrcli.otel.child RUN_ID``.

The run hands this process its trace records as they are written, one JSON line each on
standard input (``live.SpanProcess``); a JSON array ``[job_id]`` says that job ended
(``[job_id, 1]``: and the run dropped some of its calls before they came here). The
records become spans and are sent by ``sender.LiveSender`` here, so neither the OpenTelemetry
SDK nor its protobuf encoding (about 115 µs of CPU a span) shares the run's interpreter. At the
end of input (the run ended, or was killed) what is left is sent under the sender's drain rules
and one JSON object, the ``SendReport``, is written to standard output.

The collector's URL comes in the environment (``URL_VARIABLE``), never on the command line,
where other users of the machine could read a URL holding a token.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import orjson

from rrcli.otel.report import URL_VARIABLE
from rrcli.otel.sender import LiveSender, Shipper


def main(run_id: str) -> None:
    sender = LiveSender(Shipper(os.environ.pop(URL_VARIABLE)), run_id)
    for line in sys.stdin.buffer:
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:  # the run writes whole lines; a torn last one is no span
            continue
        if type(item) is list:
            sender.job_done(item[0], dropped=len(item) > 1)
        else:
            sender.put(item)
    report = sender.close()
    sys.stdout.buffer.write(orjson.dumps(dataclasses.asdict(report)))
    sys.stdout.flush()
    os._exit(0)  # a batch the sender gave up on may still hang in its thread


if __name__ == "__main__":
    main(sys.argv[1])
