"""An order's timeline: one entry per write of its state record, built from the record before and after.

Every writer of state records appends its entry in the write it makes anyway (:func:`note`, called by
the few write primitives: the fenced write of the activities, the claim, the supervisor's recoveries,
:func:`orderflow.order_requests.apply_request`, the reply outbox, retention, the intake's create), so the
timeline costs no write of its own. The record keeps the newest entries; when a write takes it past
:data:`TIMELINE_WINDOW` the store moves the oldest into the history container, in the same call
(:func:`split_overflow`; docs/operations.md#the-timeline).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orderflow.records import StateRecord, StepChange, TimelineChunk, TimelineEntry

TIMELINE_WINDOW = 32
"""Most entries a state record holds; a write past it moves the oldest out (:data:`TIMELINE_KEEP` stay)."""

TIMELINE_KEEP = 16
"""Entries a record keeps when its window overflows: the rest move to history in one document, so a
move costs one extra write per ``TIMELINE_WINDOW - TIMELINE_KEEP`` entries, never one per write."""


@dataclass(frozen=True)
class Actor:
    """Who makes a write: the timeline entry's ``role``, ``by`` and ``by_name`` (:class:`TimelineEntry`)."""

    role: str
    by: str | None = None
    name: str | None = None


def _step_changes(before: StateRecord | None, after: StateRecord) -> list[StepChange]:
    changes = []
    for name, step in after.steps.items():
        old = before.steps.get(name) if before is not None else None
        if old is None and before is None:
            continue  # a new record's steps all start NotStarted: the creation says so
        if old is None or old.status is not step.status:
            changes.append(
                StepChange(step=name, from_status=old.status if old else None, to_status=step.status)
            )
    return changes


def _error_code(before: StateRecord | None, after: StateRecord) -> str | None:
    for old, new in (
        (before.last_error if before else None, after.last_error),
        (before.compensation_error if before else None, after.compensation_error),
    ):
        if new is not None and new != old:
            return new.code or new.kind
    return None


def _corrected_fields(before: StateRecord | None, after: StateRecord) -> list[str]:
    """The fields of the input corrections this write added (names only: values may be customer data)."""
    known = {c.number for c in before.corrections} if before is not None else set()
    return sorted({name for c in after.corrections if c.number not in known for name in c.input})


def _ended_outcome(before: StateRecord | None, after: StateRecord) -> str | None:
    """The outcome of an attempt tenure this write ended, if it ended one."""
    ended_before = {e.attempt for e in before.attempt_history if e.ended_at} if before else set()
    for entry in reversed(after.attempt_history):
        if entry.ended_at is not None and entry.attempt not in ended_before:
            return entry.outcome
    return None


def note(
    before: StateRecord | None,
    after: StateRecord,
    actor: Actor,
    *,
    action: str | None = None,
    outcome: str | None = None,
    at: datetime | None = None,
) -> TimelineEntry | None:
    """Append to ``after.timeline`` the entry of the write ``before`` → ``after``, in place.

    A write is recorded when it names an ``action``, changes ``processState``, a step's status, the
    attempt or the owner (``lockedBy``), adds an input correction, or ends an attempt's tenure; any other
    write (a deadline moved, a reservation settled) adds nothing. One call appends at most one entry, so
    the entries a store moves to history were all in the version the writer read (:func:`split_overflow`).

    Args:
        before: The record as read (None when ``after`` is being created).
        after: The record about to be written; changed in place.
        actor: Who writes.
        action / outcome: What was done and how it ended, when the writer names them.
        at: The entry's time (UTC); default ``after.updated_at``.

    Returns:
        The entry appended, or None.
    """
    steps = _step_changes(before, after)
    ended = _ended_outcome(before, after)
    corrected = _corrected_fields(before, after)
    moved = before is None or (
        before.process_state is not after.process_state
        or before.attempt != after.attempt
        or before.locked_by != after.locked_by
    )
    if action is None and not steps and not moved and ended is None and not corrected:
        return None
    after.timeline_seq = max(after.timeline_seq, before.timeline_seq if before else 0) + 1
    entry = TimelineEntry(
        seq=after.timeline_seq,
        at=at or after.updated_at,
        role=actor.role,
        by=actor.by,
        by_name=actor.name,
        action=action,
        from_state=before.process_state if before else None,
        to_state=after.process_state,
        steps=steps,
        outcome=outcome or ended,
        attempt=after.attempt,
        error_code=_error_code(before, after),
        corrected_fields=corrected,
    )
    after.timeline.append(entry)
    return entry


def chunk_id(order_id: str, first_seq: int, last_seq: int) -> str:
    """The id of the history document holding entries ``first_seq`` .. ``last_seq`` of an order."""
    return f"{order_id}:{first_seq:08d}-{last_seq:08d}"


def split_overflow(record: StateRecord, *, at: datetime) -> tuple[StateRecord, TimelineChunk | None]:
    """What a store writes for ``record``: the record with at most :data:`TIMELINE_WINDOW` entries, and
    the chunk of older entries to append to the history first (None when the window holds them all).

    Args:
        record: The record a writer passed to the store (not changed).
        at: The time of the move (UTC).

    Returns:
        (record to write, chunk or None): past the window the newest :data:`TIMELINE_KEEP` entries stay.
    """
    if len(record.timeline) <= TIMELINE_WINDOW:
        return record, None
    moving = record.timeline[:-TIMELINE_KEEP]
    kept = record.model_copy(update={"timeline": record.timeline[-TIMELINE_KEEP:]})
    chunk = TimelineChunk(
        id=chunk_id(record.order_id, moving[0].seq, moving[-1].seq),
        order_id=record.order_id,
        first_seq=moving[0].seq,
        last_seq=moving[-1].seq,
        entries=moving,
        moved_at=at,
    )
    return kept, chunk


def merged(history: list[TimelineChunk], record: StateRecord) -> list[TimelineEntry]:
    """The whole timeline, oldest first: the history's entries and the record's, each ``seq`` once
    (a chunk written by a writer that then lost its race repeats entries the record still holds)."""
    by_seq = {entry.seq: entry for chunk in history for entry in chunk.entries}
    by_seq.update({entry.seq: entry for entry in record.timeline})
    return [by_seq[seq] for seq in sorted(by_seq)]
