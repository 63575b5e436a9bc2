"""OpenTelemetry: trace records as OTLP spans, sent to a collector.

``spans`` turns call records into spans (one per call, a parent per job, ids derived from the
run and job so a live run and a later export agree); ``sender`` sends them from a thread while a
run goes on; ``export`` sends trace files; ``endpoint`` resolves the collector's URL. The
OpenTelemetry SDK is imported only by ``spans``, ``sender`` and ``export``, when asked for.
"""
