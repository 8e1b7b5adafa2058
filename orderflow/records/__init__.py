"""The order document and the state record (docs/design.md §2), as typed models.

Python attributes are snake_case; the stored JSON is camelCase, the field names of the reference
Scheduler-Agent-Supervisor design (``processState``, ``lockedBy``, ``completeBy`` ...). Every time is
UTC and serialised in one fixed ISO 8601 form (``2026-11-29T18:00:00.000000Z``) so that the stores can
compare deadlines as strings.

The package's modules: :mod:`.times` (UTC times), :mod:`.model` (the base model and statuses),
:mod:`.orders` (the order document), :mod:`.steps` (per-step state), :mod:`.history` (attempts and the
timeline), :mod:`.state` (the state record) and :mod:`.keys` (keys derived from an order).
"""

from __future__ import annotations

from orderflow.records.history import (
    ATTEMPT_HISTORY_MAX,
    AttemptEntry,
    StepChange,
    TimelineChunk,
    TimelineEntry,
)
from orderflow.records.keys import (
    client_order_id,
    instance_id_for,
    order_key,
    parse_instance_id,
)
from orderflow.records.model import (
    DATA_PURGE_VERSION,
    REDACTED,
    SCHEMA_VERSION,
    Model,
    ProcessState,
    StepStatus,
)
from orderflow.records.orders import OrderDocument, OrderItem, content_hash
from orderflow.records.state import StateRecord
from orderflow.records.steps import (
    CompensationEntry,
    Hold,
    InputCorrection,
    LastError,
    PendingReply,
    RetryBudget,
    ReviewDecision,
    ReviewState,
    StepState,
    UndoStatus,
)
from orderflow.records.times import (
    EARLIEST_TIME,
    LATEST_TIME,
    QUERY_TIME_FORMAT,
    UtcDatetime,
    format_utc,
    parse_query_time,
    parse_utc,
)

__all__ = [
    "ATTEMPT_HISTORY_MAX",
    "DATA_PURGE_VERSION",
    "EARLIEST_TIME",
    "LATEST_TIME",
    "QUERY_TIME_FORMAT",
    "REDACTED",
    "SCHEMA_VERSION",
    "AttemptEntry",
    "CompensationEntry",
    "Hold",
    "InputCorrection",
    "LastError",
    "Model",
    "OrderDocument",
    "OrderItem",
    "PendingReply",
    "ProcessState",
    "RetryBudget",
    "ReviewDecision",
    "ReviewState",
    "StateRecord",
    "StepChange",
    "StepState",
    "StepStatus",
    "TimelineChunk",
    "TimelineEntry",
    "UndoStatus",
    "UtcDatetime",
    "client_order_id",
    "content_hash",
    "format_utc",
    "instance_id_for",
    "order_key",
    "parse_instance_id",
    "parse_query_time",
    "parse_utc",
]
