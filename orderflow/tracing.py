"""Distributed tracing: one OpenTelemetry span per hop of an order, linked by W3C trace context.

Every role opens its span through :func:`span` (tracer ``orderflow``) with the order's correlation
attributes (:func:`order_attributes`: ``orderflow.order_id``, ``orderflow.instance_id``,
``orderflow.attempt``) and, where a message or an HTTP call is involved, the semantic-convention ones
(:func:`messaging_attributes`). The trace context crosses every asynchronous boundary as a W3C
``traceparent``: inside the JSON envelope of the messages orderflow sends (``traceparent`` of
:class:`orderflow.messages.Traced`), as the ``traceparent`` / ``Diagnostic-Id`` application property
on Service Bus, on the state record (the submission's, and each attempt's claim in its
``attemptHistory`` entry) and in the HTTP headers of the remote calls. What arrives from outside is
parsed by :func:`parse_traceparent`, which never raises: a malformed value starts a new trace, and a
trace context is never used for anything but tracing. The spans, their parentage and attributes:
docs/operations.md, "Tracing".

**Off by default.** Until a tracer provider is installed (:func:`configure_tracing` from the
``OTEL_TRACES_EXPORTER`` setting, the Azure Monitor distro, or :func:`use_tracer_provider` in a test),
:func:`span` yields a shared non-recording span without parsing anything and :func:`current_traceparent`
is None, so nothing is propagated and no message grows.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

logger = logging.getLogger(__name__)

TRACER_NAME: Final = "orderflow"
"""Name of the tracer (the instrumentation scope) of every orderflow span."""

ORDER_ID: Final = "orderflow.order_id"
INSTANCE_ID: Final = "orderflow.instance_id"
ATTEMPT: Final = "orderflow.attempt"
STEP: Final = "orderflow.step"
OUTCOME: Final = "orderflow.outcome"

# Span names (docs/operations.md, "Tracing").
SUBMISSION: Final = "orderflow.submission"
CLAIM: Final = "orderflow.claim"
ACTIVITY_PREFIX: Final = "orderflow.activity."
AGENT: Final = "orderflow.agent"
RESPONSE: Final = "orderflow.response"
REPLY: Final = "orderflow.reply"
RECOVERY: Final = "orderflow.recovery"

OpenSpan = Span
"""The type of what :func:`span` yields (an OpenTelemetry span)."""

# Span kinds, so that the roles need not import OpenTelemetry themselves.
CONSUMER: Final = SpanKind.CONSUMER
PRODUCER: Final = SpanKind.PRODUCER
CLIENT: Final = SpanKind.CLIENT

TRACEPARENT_HEADER: Final = "traceparent"
"""The W3C Trace Context header, and the Service Bus application property of the same name."""

DIAGNOSTIC_ID_PROPERTY: Final = "Diagnostic-Id"
"""The Service Bus application property the Azure SDKs and the Functions host read the parent from."""

EXPORTER_ENV: Final = "OTEL_TRACES_EXPORTER"
"""``console``, ``otlp`` (to ``OTEL_EXPORTER_OTLP_ENDPOINT``) or ``none`` (the default): the local export."""

TRACEPARENT_MAX_CHARS: Final = 512
"""Longest ``traceparent`` read; a longer value is malformed (version 00 is 55 characters)."""

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[!-~]*)?")

_provider: trace.TracerProvider | None = None
_tracer: trace.Tracer | None = None
_tracer_of: object = None
_lock = threading.Lock()
_configured = False


def parse_traceparent(value: object) -> SpanContext | None:
    """The remote span context a W3C ``traceparent`` names, or None when ``value`` is not one.

    Version ``00`` is exactly ``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``, lowercase; a later
    version may append ``-`` fields, which are ignored (W3C Trace Context §3.2.4); version ``ff``, an
    all-zero trace or span id, or anything longer than :data:`TRACEPARENT_MAX_CHARS` is refused.

    Args:
        value: Anything: a header, an application property or a field of a message.

    Returns:
        A valid remote :class:`~opentelemetry.trace.SpanContext`, or None. Never raises.
    """
    if not isinstance(value, str) or len(value) > TRACEPARENT_MAX_CHARS:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    context = SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16))
    )
    return context if context.is_valid else None


def valid_traceparent(value: object) -> str | None:
    """``value`` as a version-00 ``traceparent`` when :func:`parse_traceparent` reads it, else None."""
    context = parse_traceparent(value)
    return None if context is None else format_traceparent(context)


def format_traceparent(context: SpanContext) -> str:
    """The version-00 ``traceparent`` of ``context`` (a valid span context)."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags) & 0xFF:02x}"


def use_tracer_provider(provider: trace.TracerProvider | None) -> trace.TracerProvider | None:
    """Make ``provider`` the source of orderflow's spans (None: OpenTelemetry's global provider again).

    For tests, which cannot reset the global provider: install an SDK provider with an in-memory
    exporter, and put the previous one back after.

    Returns:
        The provider used before (None: the global one).
    """
    global _provider
    with _lock:
        previous, _provider = _provider, provider
    return previous


def _active_tracer() -> trace.Tracer | None:
    """The ``orderflow`` tracer, or None while tracing is off (no SDK provider anywhere)."""
    global _tracer, _tracer_of
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    if provider is not _tracer_of:
        with _lock:
            _tracer, _tracer_of = provider.get_tracer(TRACER_NAME), provider
    return _tracer


def enabled() -> bool:
    """Whether spans are recorded: a tracer provider is installed (:func:`configure_tracing`, the
    Azure Monitor distro, or :func:`use_tracer_provider`)."""
    return _active_tracer() is not None


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, to send on; None while tracing is off or no span is
    current."""
    if _active_tracer() is None:
        return None
    context = trace.get_current_span().get_span_context()
    return format_traceparent(context) if context.is_valid else None


def unless_current(traceparent: str | None) -> str | None:
    """``traceparent`` when no span is current, else None: for :func:`span`'s ``parent`` where the
    current span, if any, is the better parent (an activity's), and a stored one the fallback."""
    if trace.get_current_span().get_span_context().is_valid:
        return None
    return traceparent


def order_attributes(
    order_id: str | None, instance_id: str | None = None, attempt: int | None = None, **more: str | int | None
) -> dict[str, str | int]:
    """The correlation attributes of a span: ``orderflow.order_id`` (the order's key),
    ``orderflow.instance_id``, ``orderflow.attempt`` (taken from the instance id when not given), and
    ``orderflow.<key>`` for each of ``more``; None values are left out."""
    if attempt is None and instance_id is not None:
        _, _, tail = instance_id.rpartition(":")
        attempt = int(tail) if tail.isdigit() else None
    attributes: dict[str, str | int] = {}
    for key, value in ((ORDER_ID, order_id), (INSTANCE_ID, instance_id), (ATTEMPT, attempt)):
        if value is not None:
            attributes[key] = value
    for key, value in more.items():
        if value is not None:
            attributes[f"orderflow.{key}"] = value
    return attributes


def messaging_attributes(
    system: str | None,
    destination: str | None,
    *,
    message_id: str | None = None,
    operation: str = "process",
) -> dict[str, str]:
    """The OpenTelemetry messaging attributes of a message received or sent: ``messaging.system``,
    ``messaging.destination.name`` and ``messaging.message.id`` when known, and
    ``messaging.operation.type`` (``process`` or ``send``)."""
    attributes = {"messaging.operation.type": operation}
    for key, value in (
        ("messaging.system", system),
        ("messaging.destination.name", destination),
        ("messaging.message.id", message_id),
    ):
        if value is not None:
            attributes[key] = value
    return attributes


def messaging_system(queues: object) -> str | None:
    """The ``messaging.system`` of a queue factory (its ``messaging_system`` attribute), or None."""
    system = getattr(queues, "messaging_system", None)
    return system if isinstance(system, str) else None


NOT_RECORDING: Final[Span] = trace.INVALID_SPAN
"""The span :func:`span` yields while tracing is off (records nothing, propagates nothing)."""


@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: str | None = None,
    transport_parent: str | None = None,
    links: Sequence[str | None] = (),
    attributes: Mapping[str, str | int | bool] | None = None,
) -> Iterator[Span]:
    """Open span ``name`` as the current span for the ``with`` block; an exception escaping it is
    recorded on the span (status ERROR) and re-raised.

    Args:
        name: One of the span names above (``orderflow.agent``), or an HTTP span's ``POST /path``.
        kind: Its OpenTelemetry kind: CONSUMER for a message processed, CLIENT for a remote call,
            PRODUCER for a reply sent, INTERNAL otherwise.
        parent: The ``traceparent`` the message or record carries; malformed or None: the current
            context's span is the parent (none: a new trace).
        transport_parent: The trace context the transport handed over (an Azure trigger's
            ``context.trace_context``), preferred over ``parent`` when it continues the same trace (or
            ``parent`` is missing or malformed): the host's span then sits between the sender's and
            this one. When both are valid but of different traces, ``parent`` stays the parent (an
            order's spans are one trace) and ``transport_parent`` becomes a link.
        links: ``traceparent`` values of spans this one follows from without being their child (a
            recovered attempt's claim links the attempt before it); malformed and None ones are skipped.
        attributes: Initial attributes (:func:`order_attributes`, :func:`messaging_attributes`).

    Yields:
        The span (a shared non-recording one while tracing is off: nothing is parsed then).
    """
    tracer = _active_tracer()
    if tracer is None:
        yield NOT_RECORDING
        return
    context, linked = _parent_context(parent, transport_parent)
    for value in links:
        followed = parse_traceparent(value)
        if followed is not None:
            linked = (*linked, Link(followed))
    with tracer.start_as_current_span(
        name, context=context, kind=kind, attributes=attributes, links=linked, record_exception=True
    ) as opened:
        yield opened


def _parent_context(
    parent: str | None, transport_parent: str | None
) -> tuple[Context | None, tuple[Link, ...]]:
    """The context to start a span in, and its links (see :func:`span`)."""
    from_transport = parse_traceparent(transport_parent)
    from_message = parse_traceparent(parent)
    chosen = from_transport or from_message
    links: tuple[Link, ...] = ()
    if (
        from_transport is not None
        and from_message is not None
        and from_message.trace_id != from_transport.trace_id
    ):
        # The host did not continue the sender's trace: keep the order's, and link the invocation.
        chosen, links = from_message, (Link(from_transport),)
    if chosen is None:
        return None, ()
    return trace.set_span_in_context(trace.NonRecordingSpan(chosen)), links


def mark_outcome(opened: Span, outcome: str, *, error: bool = False) -> None:
    """Set ``orderflow.outcome`` on a span, and its status to ERROR with ``outcome`` when ``error``."""
    if not opened.is_recording():
        return
    opened.set_attribute(OUTCOME, outcome)
    if error:
        opened.set_status(Status(StatusCode.ERROR, outcome))


def configure_tracing(service_name: str, *, exporter: str | None = None) -> bool:
    """Install a tracer provider exporting to the console or an OTLP endpoint, once per process.

    ``exporter`` (default: the ``OTEL_TRACES_EXPORTER`` environment variable) is ``console`` (one JSON
    span per line on stdout), ``otlp`` (OTLP over HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``, default
    ``http://localhost:4318``, read by the exporter), or ``none`` / empty (nothing: the default). Does
    nothing when a provider is installed already (the Azure Monitor distro's, by
    :func:`orderflow.telemetry.configure_telemetry`).

    Args:
        service_name: ``service.name`` of this process's resource.
        exporter: As above; None reads the environment.

    Returns:
        True if spans are exported (now or already); False when tracing stays off, also when
        ``exporter`` names none of the above (logged at ERROR: the process goes on without traces, as it
        does when Azure Monitor refuses its configuration).
    """
    global _configured  # noqa: PLW0603 - the global provider is set once per process
    chosen = (exporter if exporter is not None else os.environ.get(EXPORTER_ENV, "")).strip().lower()
    if chosen not in ("", "none", "console", "otlp"):
        logger.error("%s=%r is not console, otlp or none: traces are not exported", EXPORTER_ENV, chosen[:32])
        return False
    with _lock:
        installed = trace.get_tracer_provider()
        if _configured or not isinstance(installed, trace.ProxyTracerProvider):
            return not isinstance(installed, trace.NoOpTracerProvider)
        if chosen in ("", "none"):
            return False
        # Imported here: the SDK and the exporters are unused while tracing is off.
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter  # noqa: PLC0415

        span_exporter: SpanExporter
        if chosen == "console":
            # stderr: a devhost's stdout carries its "ready" line, which the demo reads.
            span_exporter = ConsoleSpanExporter(
                out=sys.stderr, formatter=lambda s: s.to_json(indent=None) + os.linesep
            )
        else:
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                    OTLPSpanExporter,
                )
            except ImportError:
                # requirements-dev.txt installs it (the local host's); the Functions app exports to Azure.
                logger.error(
                    "%s=otlp needs opentelemetry-exporter-otlp-proto-http: traces are not exported",
                    EXPORTER_ENV,
                )
                return False
            span_exporter = OTLPSpanExporter()
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
        trace.set_tracer_provider(provider)
        _configured = True
    logger.info("traces exported to %s", chosen)
    return True
