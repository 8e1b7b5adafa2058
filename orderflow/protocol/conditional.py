"""The one conditional write of a state record (docs/design.md §3): read, decide, replace If-Match.

:func:`update` is the only code that replaces a state record (creating one is the intake's initial
insert, :func:`orderflow.stores.base.StateStore.create`, which has nothing to be conditional on). Every
writer — the claim, the fenced activities, the supervisor, a client's cancel, an operator's or a
reviewer's decision, the reply outbox, retention — hands it a *decision*: a function that receives a
private copy of the current record and returns the record to write, or None when nothing needs writing.
:func:`update` then, on every write:

- replaces on the ETag it read; a 412 means someone else moved the record: it re-reads and decides again,
  never blind-writes, up to ``attempts`` tries (:class:`ConcurrencyConflict` after that);
- fences on ``lockedBy`` when an ``owner`` is given: a record another attempt owns (or nobody, after the
  supervisor re-queued it) is not written at all, the outcome is ``fenced``;
- honours an operator's ``If-Match``: a record at another version is not decided on (:class:`StaleVersion`);
- checks the change against the state machine (:func:`check_change`);
- stamps ``updatedAt`` and notes the write on the record's timeline.

A writer that owns the record may pass its :class:`~orderflow.dependencies.RecordCache`: the first try
then uses the cached version and needs no point read. A cached copy may lag the store, so two decisions
are taken only on a fresh read: not to write (fenced, or already applied), and that the change is illegal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from orderflow.clock import Clock
from orderflow.dependencies import RecordCache
from orderflow.errors import ConcurrencyConflict, IllegalTransition
from orderflow.protocol.state_machine import check_step_transition, check_transition
from orderflow.records import StateRecord
from orderflow.stores.base import StateStore, Versioned
from orderflow.timeline import Actor, note

MAX_CONFLICT_RETRIES = 8
"""Tries (re-reads after 412s) before :func:`update` gives up with :class:`ConcurrencyConflict`."""

Decide = Callable[[StateRecord], StateRecord | None]
"""Receives a private copy of the current record; returns the record to write (usually that copy,
changed), or None when the change is already there or not to be made. It is re-run on the fresh record
after every 412, so it must decide from the record it is given, not from earlier state."""


@dataclass(frozen=True)
class Outcome:
    """What :func:`update` did.

    Attributes:
        applied: The decision was taken on the current record: written now (``written``), or found not
            to need a write.
        fenced: ``owner`` does not own the record; nothing was decided or written.
        reason: Why not applied.
        record: The record as stored after the decision.
        etag: The ETag of ``record`` as stored (for a follow-up conditional write without a read).
        written: The version written, or None when nothing was written.
    """

    applied: bool
    fenced: bool
    reason: str | None
    record: StateRecord
    etag: str
    written: Versioned[StateRecord] | None = None


class StaleVersion(Exception):
    """The record is not at the version the requester saw (an ``If-Match`` that no longer matches):
    nothing was decided or written. ``record`` and ``etag`` are the version found."""

    def __init__(self, record: StateRecord, etag: str) -> None:
        super().__init__(f"order {record.order_id} is at another version")
        self.record = record
        self.etag = etag


def same_etag(seen: str, current: str) -> bool:
    """Whether the ``If-Match`` the requester sent names the store's ETag ``current`` (which may carry
    quotes of its own), by the strong comparison RFC 9110 (13.1.1) prescribes for ``If-Match``: a weak
    tag (``W/"..."``) never matches. Nor does ``*`` or a list of tags: an action is taken only on the one
    version the requester saw (docs/operator-api.md)."""
    tag = seen.strip()
    return not tag.startswith("W/") and tag.strip('"') == current.strip('"')


def check_change(before: StateRecord, after: StateRecord, *, housekeeping: bool = False) -> None:
    """Reject a write the state machine forbids.

    Every write checks ``processState`` with :func:`check_transition` (so nothing writes a terminal
    record) and each step's status with :func:`check_step_transition`. A *housekeeping* write (the reply
    outbox cleared, a replay noted, retention's purge) moves nothing: it may land on a terminal record,
    and must leave ``processState``, ``lockedBy``, ``completeBy`` and every step's status as they were.

    Raises:
        IllegalTransition: the change is not allowed.
    """
    if housekeeping:
        moved = (
            before.process_state is not after.process_state
            or before.locked_by != after.locked_by
            or before.complete_by != after.complete_by
            or {n: s.status for n, s in before.steps.items()} != {n: s.status for n, s in after.steps.items()}
        )
        if moved:
            raise IllegalTransition(f"order {before.order_id}: a housekeeping write may not move the record")
        return
    check_transition(before.process_state, after.process_state)
    for name, step in after.steps.items():
        old = before.steps.get(name)
        if old is not None:
            check_step_transition(name, old.status, step.status)


@dataclass(frozen=True)
class Note:
    """How :func:`update` notes a write on the timeline: who, and the ``action`` and ``outcome`` it
    names (None: the entry is added only when the write moves the record, :func:`orderflow.timeline.note`)."""

    actor: Actor
    action: str | None = None
    outcome: str | None = None
    at: datetime | None = None
    """The entry's time (UTC); default the write's ``updatedAt``."""


def update(
    states: StateStore,
    key: str,
    decide: Decide,
    *,
    clock: Clock | None,
    actor: Actor | Note,
    owner: str | None = None,
    if_match: str | None = None,
    cache: RecordCache | None = None,
    found: Versioned[StateRecord] | None = None,
    attempts: int = MAX_CONFLICT_RETRIES,
    housekeeping: bool = False,
    at: datetime | None = None,
) -> Outcome:
    """Apply ``decide`` to the record ``key`` with an ETag-conditional replace (see the module docstring).

    Args:
        states: The state store.
        key: The record's id (the order key).
        decide: The decision (:data:`Decide`).
        clock: Time source of ``updatedAt``; None (a housekeeping write that moves no time, with ``at``
            None) leaves ``updatedAt`` as it was.
        actor: Who writes (the timeline entry), or a :class:`Note` naming the action too.
        owner: The writing attempt's instance id: write only while ``lockedBy`` equals it.
        if_match: The ETag the requester saw: a record at another version raises :class:`StaleVersion`.
        cache: The writer's record cache: the first try may use its version; every version read or
            written is put in it.
        found: The version the caller has just read: the first try decides on it.
        attempts: Tries before :class:`ConcurrencyConflict` (1: a lost race is not retried).
        housekeeping: The write moves nothing (:func:`check_change`).
        at: ``updatedAt`` and the timeline entry's time (UTC); default ``clock.now()``.

    Returns:
        The outcome.

    Raises:
        ConcurrencyConflict: the ETag race was lost ``attempts`` times.
        StaleVersion: ``if_match`` is not the record's ETag.
        IllegalTransition: the decision makes a change the state machine forbids (taken on a fresh read).
        NotFound: the record does not exist.
    """
    writer = _Writer(states, key, decide, cache, owner, housekeeping)
    known, fresh = writer.first(found)
    for _ in range(attempts):
        # None: read again (fresh) before deciding; a try that is never made reads nothing.
        current = known if known is not None else writer.read()
        fresh = fresh or known is None
        if if_match is not None and not same_etag(if_match, current.etag):
            raise StaleVersion(current.item, current.etag)
        decided = writer.decide(current, fresh)
        if decided is None:
            known = None  # a decision a cached copy may not take: confirm it on a fresh read
            continue
        if not isinstance(decided, StateRecord):
            return decided
        try:
            written = writer.write(current, decided, clock=clock, actor=actor, at=at)
        except ConcurrencyConflict:
            known = None  # someone else moved the record (or the cache was stale): decide again
            continue
        return Outcome(True, False, None, written.item, written.etag, written)
    if cache is not None:
        cache.discard(key)
    raise ConcurrencyConflict(f"order {key}: still conflicting after {attempts} tries")


@dataclass(frozen=True)
class _Writer:
    """The parts of :func:`update` that do not change from one try to the next."""

    states: StateStore
    key: str
    decide_: Decide
    cache: RecordCache | None
    owner: str | None
    housekeeping: bool

    def first(self, found: Versioned[StateRecord] | None) -> tuple[Versioned[StateRecord] | None, bool]:
        """The version the first try decides on (None: read it) and whether it is a fresh read."""
        if found is not None:
            return found, True
        cached = self.cache.get(self.key) if self.cache is not None else None
        return cached, False

    def read(self) -> Versioned[StateRecord]:
        version = self.states.get(self.key)
        if self.cache is not None:
            self.cache.put(version)
        return version

    def decide(self, current: Versioned[StateRecord], fresh: bool) -> StateRecord | Outcome | None:
        """The record to write, or the outcome of a decision not to write, or None to re-read first (a
        decision a cached copy may not take)."""
        record = current.item
        owned = self.owner is None or record.locked_by == self.owner
        try:
            proposed = self.decide_(record.copied()) if owned else None
            if proposed is not None:
                check_change(record, proposed, housekeeping=self.housekeeping)
        except IllegalTransition:
            if fresh:
                raise
            return None
        if proposed is None and not fresh:
            return None
        if not owned:
            return Outcome(False, True, f"lockedBy is {record.locked_by!r}", record, current.etag)
        return proposed if proposed is not None else Outcome(True, False, None, record, current.etag)

    def write(
        self,
        current: Versioned[StateRecord],
        proposed: StateRecord,
        *,
        clock: Clock | None,
        actor: Actor | Note,
        at: datetime | None,
    ) -> Versioned[StateRecord]:
        stamp = at or (clock.now() if clock is not None else None)
        if stamp is not None:
            proposed.updated_at = stamp
        how = actor if isinstance(actor, Note) else Note(actor)
        note(current.item, proposed, how.actor, action=how.action, outcome=how.outcome, at=how.at)
        written = self.states.replace(proposed, etag=current.etag)
        if self.cache is not None:
            self.cache.put(written)
        return written
