"""Fenced, conditional state writes: the write primitive of every orchestration activity.

A fenced write (docs/design.md §3.1, §3.3) applies only while the record's ``lockedBy`` equals the writer's
instance id, and only through an If-Match replace on the ETag it read. A 412 means someone else moved
the record: re-read and decide again, never blind-write. A record that belongs to another attempt (or
to nobody, after the supervisor re-queued it) is not written at all: the caller gets ``fenced``.

:class:`RecordCache` keeps the last version this process wrote or read per order, so the orchestration
of a claim made in this process writes without a point read; a stale cached ETag costs one 412 and a
re-read, never a wrong write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from orderflow.clock import Clock
from orderflow.dependencies import RecordCache
from orderflow.errors import ConcurrencyConflict, IllegalTransition
from orderflow.records import StateRecord
from orderflow.state_machine import check_step_transition, check_transition
from orderflow.stores.base import StateStore, Versioned
from orderflow.timeline import Actor, note

logger = logging.getLogger(__name__)

MAX_CONFLICT_RETRIES = 8
"""Re-reads after 412s before giving up with ConcurrencyConflict (the activity is then retried)."""


@dataclass(frozen=True)
class WriteOutcome:
    """What a fenced write did.

    Attributes:
        applied: The change is in the store (written now, or found already made).
        fenced: The writer does not own the record; nothing was written.
        reason: Why not applied.
        record: The record as stored after the decision.
        etag: The ETag of ``record`` as stored (for a follow-up conditional write without a read).
    """

    applied: bool
    fenced: bool
    reason: str | None
    record: StateRecord
    etag: str | None = None


Mutation = Callable[[StateRecord], StateRecord | None]
"""Receives a private copy of the current record; returns the record to write, or None when the change
is already there (an activity re-run) and nothing needs writing."""


def fenced_write(
    store: StateStore,
    cache: RecordCache,
    clock: Clock,
    *,
    order_id: str,
    instance_id: str,
    mutate: Mutation,
) -> WriteOutcome:
    """Apply ``mutate`` to the record of ``order_id`` if ``instance_id`` still owns it.

    The mutation is re-run on the fresh record after every 412, so it must decide from the record it is
    given, not from earlier state. The process-state and step-status changes it makes are checked
    against the state machine.

    Returns:
        The outcome: applied, or fenced with a reason.

    Raises:
        ConcurrencyConflict: still losing races after :data:`MAX_CONFLICT_RETRIES` re-reads.
        IllegalTransition: the mutation made a change the state machine forbids (decided on a fresh read,
            never on a cached copy).
        NotFound: the record does not exist.
    """
    cached = cache.get(order_id)
    current = cached or _read(store, cache, order_id)
    fresh = cached is None
    for _ in range(MAX_CONFLICT_RETRIES):
        record = current.item
        try:
            proposed = None if record.locked_by != instance_id else mutate(record.copied())
            if proposed is not None:
                _check(record, proposed)
        except IllegalTransition:
            if fresh:
                raise
            # A cached copy may lag the record: the attempt's previous write ran on another worker (each
            # has its own cache), or the attempt was superseded. Only a fresh read may refuse the change.
            current, fresh = _read(store, cache, order_id), True
            continue
        if proposed is None and not fresh:
            # A decision not to write (fenced, or already applied) is never taken on a cached copy:
            # another process may have moved the record since. Confirm it on a fresh read.
            current, fresh = _read(store, cache, order_id), True
            continue
        if record.locked_by != instance_id:
            return WriteOutcome(False, True, f"lockedBy is {record.locked_by!r}", record, current.etag)
        if proposed is None:
            return WriteOutcome(True, False, None, record, current.etag)
        proposed.updated_at = clock.now()
        note(record, proposed, Actor("orchestrator", instance_id))
        try:
            written = store.replace(proposed, etag=current.etag)
        except ConcurrencyConflict:
            # Someone else moved the record (or the cache was stale): re-read and decide again.
            current, fresh = _read(store, cache, order_id), True
            continue
        cache.put(written)
        return WriteOutcome(True, False, None, written.item, written.etag)
    cache.discard(order_id)
    raise ConcurrencyConflict(f"order {order_id}: still conflicting after {MAX_CONFLICT_RETRIES} re-reads")


def _read(store: StateStore, cache: RecordCache, order_id: str) -> Versioned[StateRecord]:
    version = store.get(order_id)
    cache.put(version)
    return version


def _check(before: StateRecord, after: StateRecord) -> None:
    check_transition(before.process_state, after.process_state)
    for name, step in after.steps.items():
        old = before.steps.get(name)
        if old is not None:
            check_step_transition(name, old.status, step.status)
