"""Recording orderflow's spans in a test: an SDK tracer provider with an in-memory exporter, installed
through :func:`orderflow.tracing.use_tracer_provider` for one ``with`` block (the global provider, which
can be set only once per process, is never touched)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orderflow import tracing


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """Record every span orderflow opens, from any thread, while the block runs.

    Yields:
        The exporter; ``get_finished_spans()`` lists the spans ended so far.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_tracer_provider(previous)
        provider.shutdown()


def of_order(spans: Sequence[ReadableSpan], order_key: str) -> list[ReadableSpan]:
    """The spans whose ``orderflow.order_id`` is ``order_key``."""
    return [s for s in spans if (s.attributes or {}).get(tracing.ORDER_ID) == order_key]


def parent_of(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> ReadableSpan | None:
    """The span among ``spans`` that is ``span``'s parent, or None (a root, or a parent not recorded)."""
    if span.parent is None:
        return None
    return next(
        (s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id), None
    )
