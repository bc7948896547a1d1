"""OpenTelemetry tracing for the API and worker processes (optional extra ``otel``).

Off unless ``WDS_OTEL=true`` or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. When on:

* :func:`setup_tracing` installs a global tracer provider named by ``OTEL_SERVICE_NAME``
  (default ``wds-api`` / ``wds-worker``) exporting to what ``OTEL_TRACES_EXPORTER`` names:
  ``otlp`` (default; OTLP over HTTP/protobuf, configured by the standard
  ``OTEL_EXPORTER_OTLP_*`` variables), ``console`` (one JSON span per line on stdout,
  for development and tests) or ``none``; several may be comma-separated;
* :func:`instrument_app` traces every FastAPI request (``/healthz`` and ``/metrics``
  excluded);
* :func:`temporal_interceptors` gives Temporal's ``TracingInterceptor`` for
  ``Client.connect``: starting a pipeline workflow, the workflow and its activities join
  the request's trace, across processes (the context travels in workflow headers).

Without the packages (``pip install 'workspace-data-service[otel]'``) tracing stays off
and one warning says why.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("wds.tracing")
_ACTIVE: bool | None = None  # set once per process by setup_tracing


def wanted(enabled: bool = False) -> bool:
    """Whether tracing is asked for: the ``otel`` setting, or an OTLP endpoint configured.

    >>> wanted(True)
    True
    """
    return enabled or bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def _exporters() -> list[Any]:
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    out: list[Any] = []
    for name in (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(","):
        name = name.strip().lower()
        if name == "console":
            # one span per line: greppable in a log file
            out.append(ConsoleSpanExporter(formatter=lambda span: span.to_json(indent=None) + os.linesep))
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            out.append(OTLPSpanExporter())
        elif name and name != "none":
            log.warning("OTEL_TRACES_EXPORTER=%s is not supported (otlp, console, none)", name)
    return out


def setup_tracing(service_name: str, *, enabled: bool = False) -> bool:
    """Install the global tracer provider once per process; returns whether tracing is on."""
    global _ACTIVE
    if _ACTIVE is not None:
        return _ACTIVE
    _ACTIVE = False
    if not wanted(enabled):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )

        exporters = _exporters()
    except ImportError as exc:
        log.warning("tracing requested but OpenTelemetry is not installed (the 'otel' extra): %s", exc)
        return False
    provider = TracerProvider(
        resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
    )
    for exporter in exporters:
        # the console exporter is for development: write each span as it ends
        processor = SimpleSpanProcessor if isinstance(exporter, ConsoleSpanExporter) else BatchSpanProcessor
        provider.add_span_processor(processor(exporter))
    trace.set_tracer_provider(provider)
    _ACTIVE = True
    log.info("OpenTelemetry tracing on (%s)", service_name)
    return True


def instrument_app(app: Any) -> None:
    """Trace the FastAPI app's requests when tracing is on."""
    if not _ACTIVE:
        return
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    except ImportError as exc:
        log.warning("request tracing needs opentelemetry-instrumentation-fastapi (the 'otel' extra): %s", exc)
        return
    FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz,metrics")


def temporal_interceptors() -> list[Any]:
    """Interceptors for ``Client.connect``: Temporal's tracing interceptor when tracing is on
    (a client interceptor that is also a worker interceptor applies to workers built on
    that client)."""
    if not _ACTIVE:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]
