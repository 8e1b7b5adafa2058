"""The trace context the Functions host hands a trigger's invocation, for the roles' spans.

The host starts an invocation's activity as a child of what the message named (the Service Bus
``Diagnostic-Id`` / ``traceparent`` application property that :mod:`orderflow.queues.servicebus` sets)
and passes it as ``azure.functions.Context.trace_context``; a role's span is opened under it, so the
host's request telemetry sits between the sender's span and the role's in one trace
(docs/operations.md, "Tracing").
"""

from __future__ import annotations

import azure.functions as func

from orderflow.tracing import valid_traceparent


def trigger_traceparent(context: func.Context | None) -> str | None:
    """The invocation's W3C ``traceparent`` (``context.trace_context.trace_parent``), or None when the
    host passed none, or one :func:`orderflow.tracing.parse_traceparent` refuses (never raises)."""
    trace_context = getattr(context, "trace_context", None)
    return valid_traceparent(getattr(trace_context, "trace_parent", None))
