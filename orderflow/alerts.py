"""Operator alerts as stored documents, the supervisor's sweep status, and the one table of alert kinds.

:func:`orderflow.telemetry.alert` logs an alert and counts it; a host that wires an
:class:`orderflow.alert_sink.AlertSink` also keeps it, as an :class:`AlertDoc`, in the ``alerts``
container of the state store's database; the alerts of a kind a client can raise at will
(:attr:`AlertKind.counted_by`) are counted into one document per kind, client and window
(:func:`counted`), so that one client cannot fill the newest page. The supervisor writes one
:class:`SweepDoc` per sweep to the same container (kind :data:`SWEEP_KIND`), and adds what each sweep did
to the :class:`SweepTallyDoc` of its minute (kind :data:`TALLY_KIND`), which the activity chart reads.
An operator's replay of a dead letter leaves a :class:`ReplayDoc` there too (kind :data:`REPLAY_KIND`),
which a second replay of the same dead letter reads to say who replayed it and when. The container's
default time-to-live bounds it (:data:`ALERT_TTL_S`); a sweep document lives :data:`SWEEP_TTL_S`, a tally
:data:`TALLY_TTL_S`, a replay record as long as a dead letter is kept (``DEAD_LETTER_RETENTION_S``).
Documents are partitioned by their UTC day (``day``), so that a listing reads one partition at a time,
newest first (docs/operations.md, "Stored alerts").
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from pydantic import Field, model_validator

from orderflow.records import Model, UtcDatetime


@dataclass(frozen=True)
class AlertKind:
    """What an alert of one kind means, and what an operator should do about it.

    Attributes:
        summary: What happened, in a few words (the start of every such alert's ``cause``).
        action: The suggested action, shown with every alert of the kind.
        counted_by: For a kind raised over and over by one cause, the alert field that names that cause
            from a fact: for a kind a client can raise at will, the client (its id as the registry gave it
            for the queue the message arrived on, or that queue's name); for a store anomaly met on every
            sweep, its reason; for orders given up while a dependency stays down (any client's orders can
            be sent to it), the dependency. The kind's alerts with one value of it within one
            ``ALERT_WINDOW_S`` are counted into one stored alert (:func:`counted`). None: every alert of
            the kind is stored on its own.
    """

    summary: str
    action: str
    counted_by: str | None = None


ALERT_KINDS: Final[Mapping[str, AlertKind]] = {
    "order_gave_up": AlertKind(
        "the supervisor gave up the order's forward progress; it is Compensating",
        "nothing for the order (the next attempt undoes it and replies); a run of them points at a "
        "dependency that is down",
    ),
    "breaker_open": AlertKind(
        "a dependency's circuit breaker opened; its steps wait",
        "find out why the dependency is down; orders resume once a probe succeeds",
    ),
    "dependency_wait_exhausted": AlertKind(
        "the order waited BREAKER_MAX_WAIT_S for an open breaker and is compensated",
        "nothing for the order; the dependency is still down",
        counted_by="dependency",
    ),
    "service_auth_refused": AlertKind(
        "a remote service refused the agent's credential (HTTP 401 or 403); its steps are retried, not "
        "compensated",
        "check the service binding's auth scope (SERVICE_BINDINGS), the app identity's app role on the "
        "service and the service's expected audience; orders resume once a call is accepted",
        counted_by="dependency",
    ),
    "order_failed": AlertKind(
        "the order is Error: a step that takes corrected input was refused by its service (lastError says "
        "which and why)",
        "look at it with `orderflow orders show`; correct the input and `orderflow resubmit <key> --input "
        "FILE`, or `orderflow compensate <key>`",
    ),
    "past_point_of_no_return": AlertKind(
        "forward progress stopped after an irreversible step; the order is Error, not compensated",
        "look at it with `orderflow orders show`; once the cause is fixed, `orderflow resubmit`",
    ),
    "compensation_failed": AlertKind(
        "an undo kept failing; the order is CompensationFailed",
        "fix the cause, then `orderflow compensate` (or `orderflow resubmit`) retries the compensation",
    ),
    "conflicting_order": AlertKind(
        "a submission reused a known order id with different content; it was dead-lettered",
        "tell the client",
        counted_by="client_id",
    ),
    "max_delivery_count": AlertKind(
        "a message failed MAX_DELIVERY_COUNT times and was dead-lettered",
        "read the dead letter (`orderflow deadletters show`); replay it once the cause is fixed",
        counted_by="queue",
    ),
    "clock_skew": AlertKind(
        "this host's clock is far from the state store's",
        "fix the host's time source; replace the instance if it persists",
    ),
    "poison_order": AlertKind(
        "the order's last attempts failed at the same step with the same code; it is suspended",
        "look at the failure; `orderflow resume` runs it again, `orderflow compensate` undoes it",
    ),
    "holds_expire_while_suspended": AlertKind(
        "an operator suspended an order holding resources (stock, an authorisation) that expire before "
        "it can be resumed: the services release them at expiresAt",
        "resume it soon (`orderflow resume`): the order re-acquires a lapsed hold once, or is compensated",
    ),
    "scan_anomaly": AlertKind(
        "the store answered the supervisor's scan of expired orders without an end; the scan starts over",
        "check the state store (its service health, a gateway between); expired orders are still recovered "
        "on each sweep",
        counted_by="reason",
    ),
    "workflow_version_failing": AlertKind(
        "orders of one workflow version keep failing at the same step with the same code",
        "for workflow_error, a broken version: set WORKFLOW_VERSION to one that works for new orders; for a "
        "service's own code, check that service",
    ),
}
"""Every alert kind orderflow raises (``telemetry.alert(<kind>, ...)``), with its suggested action. The
table of docs/operations.md ("When an alert fires") names the same kinds (tests/unit/test_alerts.py)."""

UNKNOWN_KIND_ACTION: Final = "see docs/operations.md, 'When an alert fires'"
"""The suggested action of an alert whose kind is not in :data:`ALERT_KINDS` (none is, by test)."""

SWEEP_KIND: Final = "supervisor_sweep"
"""The ``kind`` of a supervisor's sweep document: never an alert, never listed as one."""

TALLY_KIND: Final = "supervisor_tally"
"""The ``kind`` of a per-minute tally of the sweeps (:class:`SweepTallyDoc`): never an alert either."""

REPLAY_KIND: Final = "deadletter_replay"
"""The ``kind`` of the record of a dead letter's replay (:class:`ReplayDoc`): an operator's action, not
an alert."""

NOT_ALERTS: Final = (SWEEP_KIND, TALLY_KIND, REPLAY_KIND)
"""The kinds of the container's documents that are not alerts: the alert list leaves them out."""

ALERT_TTL_S: Final = 14 * 24 * 3600
"""Seconds an alert is kept: the ``alerts`` container's default time-to-live (infra/modules/cosmos.bicep)."""

SWEEP_TTL_S: Final = 3600
"""Seconds a sweep document is kept (its own ``ttl``): status wants only the latest few sweeps."""

TALLY_S: Final = 60
"""Seconds of sweeps one :class:`SweepTallyDoc` adds up: a whole UTC minute."""

TALLY_TTL_S: Final = 26 * 3600
"""Seconds a tally is kept (its own ``ttl``): the activity chart's longest window (24 h) and some."""

ALERTS_CONTAINER: Final = "alerts"
"""Container id of the alerts and sweep documents."""

ALERTS_PARTITION_KEY_PATH: Final = "/day"
"""Partition key path of the alerts container: the document's UTC day, ``YYYY-MM-DD``."""

DAY_S: Final = 24 * 3600
"""Seconds in a day: the longest counting window (``ALERT_WINDOW_S``)."""

MAX_TEXT: Final = 500
"""Most characters of a detail value kept in a stored alert."""

CORRELATION_FIELDS: Final = ("order_id", "instance_id")
CAUSE_FIELDS: Final = ("reason", "code", "step", "dependency", "queue", "workflow_version")
"""Fields that say why, in the order they are appended to the kind's summary in ``cause``."""

Detail = str | int | float | bool


def day_of(at: datetime) -> str:
    """The partition of a document written at ``at``: its UTC day, ``YYYY-MM-DD``."""
    if at.utcoffset() is None:
        raise ValueError("datetimes must be timezone-aware (UTC)")
    return at.astimezone(UTC).date().isoformat()


def suggested_action(kind: str) -> str:
    """The suggested action of ``kind`` (:data:`ALERT_KINDS`), or :data:`UNKNOWN_KIND_ACTION`."""
    known = ALERT_KINDS.get(kind)
    return known.action if known is not None else UNKNOWN_KIND_ACTION


class AlertDoc(Model):
    """One stored operator alert, or the alerts of one kind from one client within one window, counted.

    Attributes:
        id: A fresh unique id; for a counted alert, :func:`counted_alert_id` (one per kind, client and
            window, so that every writer finds the same document).
        day: The partition, :func:`day_of` ``at`` (a window never spans two days).
        kind: The alert's name (a key of :data:`ALERT_KINDS`).
        at: When it was raised (UTC, the raising host's clock); for a counted alert, the last time (the
            listing's order: an alert raised again comes first again).
        host: The host that raised it (the latest occurrence's).
        order_id: The order it is about, if any (the latest occurrence's).
        instance_id: The orchestration instance it is about, if any.
        cause: The kind's summary and the fields that say why (``reason=...``, ``code=...``).
        suggested_action: From :data:`ALERT_KINDS`.
        details: The alert's other fields, scalars, texts cut at :data:`MAX_TEXT` characters.
        count: How many times it was raised (1 for an alert stored on its own).
        first_seen: When it was first raised (UTC); ``at`` is the last time.
    """

    id: str
    day: str
    kind: str
    at: UtcDatetime
    host: str | None = None
    order_id: str | None = None
    instance_id: str | None = None
    cause: str
    suggested_action: str
    details: dict[str, Detail] = {}
    count: int = Field(1, ge=1)
    first_seen: UtcDatetime

    @model_validator(mode="before")
    @classmethod
    def _first_seen_is_at_by_default(cls, data: Any) -> Any:
        # A single alert's first time is its only one.
        if isinstance(data, dict) and "firstSeen" not in data and "first_seen" not in data:
            return {**data, "first_seen": data.get("at")}
        return data


class SweepDoc(Model):
    """What one supervisor sweep did, written once at its end (kind :data:`SWEEP_KIND`).

    Attributes:
        id, day, at, host: As for :class:`AlertDoc`; ``at`` is the sweep's end.
        leadership: ``lease`` (a local supervisor, which sweeps only while it holds the blob lease:
            :mod:`devhost.lease`) or ``timer`` (an Azure timer trigger, a singleton per app).
        scanned: Records examined.
        recovered: Orders re-queued for another attempt.
        gave_up: Orders given up (moved to Compensating or CompensationFailed).
        held: Orders the poison guard suspended.
        stuck: Expired records found (the ``orderflow.stuck_orders`` gauge's value).
        duration_s: How long the sweep took, seconds.
        complete: The scan reached its last page.
        ttl: The document's own time-to-live, seconds (:data:`SWEEP_TTL_S`).
    """

    id: str
    day: str
    kind: Literal["supervisor_sweep"] = SWEEP_KIND
    at: UtcDatetime
    host: str
    leadership: Literal["lease", "timer"]
    scanned: int
    recovered: int
    gave_up: int
    held: int
    stuck: int
    duration_s: float
    complete: bool
    ttl: int = SWEEP_TTL_S


def new_id() -> str:
    """A fresh document id (32 hex digits)."""
    return uuid.uuid4().hex


def _detail(value: Any) -> Detail | None:
    if value is None:
        return None
    if isinstance(value, bool | int | float):
        return value
    text = getattr(value, "value", value)  # an enum's value
    if isinstance(value, datetime):
        text = value.isoformat()
    return str(text)[:MAX_TEXT]


def alert_doc(kind: str, fields: Mapping[str, Any], *, at: datetime, host: str | None) -> AlertDoc:
    """The stored form of ``telemetry.alert(kind, **fields)`` raised at ``at`` on ``host``.

    ``order_id`` and ``instance_id`` become fields of their own; :data:`CAUSE_FIELDS` present are added
    to the kind's summary as ``cause``; every other field not None is kept in ``details``.
    """
    details = {key: d for key, value in fields.items() if (d := _detail(value)) is not None}
    known = ALERT_KINDS.get(kind)
    summary = known.summary if known is not None else kind
    why = " ".join(f"{key}={details[key]}" for key in CAUSE_FIELDS if key in details)
    order_id, instance_id = (details.pop(key, None) for key in CORRELATION_FIELDS)
    return AlertDoc(
        id=new_id(),
        day=day_of(at),
        kind=kind,
        at=at,
        host=host,
        order_id=None if order_id is None else str(order_id),
        instance_id=None if instance_id is None else str(instance_id),
        cause=f"{summary} ({why})" if why else summary,
        suggested_action=suggested_action(kind),
        details=details,
    )


def counted_source(kind: str, fields: Mapping[str, Any]) -> str | None:
    """Whom an alert of ``kind`` with ``fields`` is counted for: the value of its kind's
    :attr:`AlertKind.counted_by` field; None for a kind whose alerts are stored one by one, or without
    that field."""
    known = ALERT_KINDS.get(kind)
    if known is None or known.counted_by is None:
        return None
    value = fields.get(known.counted_by)
    return None if value is None or str(value) == "" else str(value)


def check_window(window_s: int) -> int:
    """``window_s``, a counting window's length in seconds, if it is a whole number from 1 to a day.

    Raises:
        ValueError: it is not.
    """
    if isinstance(window_s, bool) or not isinstance(window_s, int) or not 1 <= window_s <= DAY_S:
        raise ValueError(f"a counting window is a whole number of seconds, 1 to {DAY_S}, not {window_s!r}")
    return window_s


def window_start(at: datetime, window_s: int) -> datetime:
    """The start of the counting window ``at`` falls in (UTC).

    Windows of ``window_s`` seconds start at UTC midnight, so none spans two days (the day's last one is
    shorter when ``window_s`` does not divide a day): a counted alert stays in one day's partition.

    Raises:
        ValueError: ``at`` is naive, or ``window_s`` is not a whole number of seconds from 1 to a day.
    """
    if at.utcoffset() is None:
        raise ValueError("datetimes must be timezone-aware (UTC)")
    check_window(window_s)
    utc = at.astimezone(UTC)
    midnight = utc.replace(hour=0, minute=0, second=0, microsecond=0)
    elapsed = int((utc - midnight).total_seconds())
    return midnight + timedelta(seconds=elapsed - elapsed % window_s)


def counted_alert_id(kind: str, source: str, start: datetime) -> str:
    """The id of the counted alert of ``kind`` from ``source`` in the window starting at ``start``:
    ``<kind>-<16 hex digits of the source's SHA-256>-YYYYMMDDTHHMMSS`` (a queue name may hold characters
    a document id may not)."""
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{kind}-{digest}-{start.astimezone(UTC).strftime('%Y%m%dT%H%M%S')}"


def counted(stored: AlertDoc | None, occurrence: AlertDoc) -> AlertDoc:
    """``stored`` (None: none yet) with ``occurrence``, an alert of the same kind, source and window,
    added: the counts summed, the first time kept, and the fields of whichever was raised last.

    Raises:
        ValueError: ``stored`` is another document than ``occurrence`` is counted into.
    """
    if stored is None:
        return occurrence
    if (stored.id, stored.kind) != (occurrence.id, occurrence.kind):
        raise ValueError(f"alert {occurrence.id} is not counted into {stored.id}")
    latest = occurrence if occurrence.at >= stored.at else stored
    return latest.model_copy(
        update={
            "id": stored.id,
            "day": stored.day,
            "count": stored.count + occurrence.count,
            "first_seen": min(stored.first_seen, occurrence.first_seen),
        }
    )


class SweepTallyDoc(Model):
    """What the sweeps that ended in one UTC minute did, added up (kind :data:`TALLY_KIND`).

    One document per minute, id :func:`tally_id`, rewritten (ETag-conditional) by each sweep ending in
    it: so the activity chart reads at most one document per minute of its window, whatever the sweep
    cadence, and for as long as :data:`TALLY_TTL_S` after the sweep documents have expired.

    Attributes:
        id, day: As for :class:`AlertDoc`.
        at: The minute's start (UTC, whole minute).
        sweeps: Sweeps that ended in the minute.
        recovered, gave_up, held: Their sums (re-queued, given up, suspended by the poison guard).
        stuck_max: The largest stuck-orders count among them; ``stuck_last`` the latest one's.
        last_sweep_at: When the latest of them ended.
        ttl: :data:`TALLY_TTL_S`.
    """

    id: str
    day: str
    kind: Literal["supervisor_tally"] = TALLY_KIND
    at: UtcDatetime
    sweeps: int = 0
    recovered: int = 0
    gave_up: int = 0
    held: int = 0
    stuck_max: int = 0
    stuck_last: int = 0
    last_sweep_at: UtcDatetime | None = None
    ttl: int = TALLY_TTL_S


def minute_of(at: datetime) -> datetime:
    """The start of the UTC minute ``at`` falls in.

    Raises:
        ValueError: ``at`` is naive.
    """
    if at.utcoffset() is None:
        raise ValueError("datetimes must be timezone-aware (UTC)")
    return at.astimezone(UTC).replace(second=0, microsecond=0)


def tally_id(minute: datetime) -> str:
    """The id of the tally of ``minute``'s minute: ``tally-YYYYMMDDTHHMM``."""
    return "tally-" + minute_of(minute).strftime("%Y%m%dT%H%M")


def tallied(tally: SweepTallyDoc | None, sweep: SweepDoc) -> SweepTallyDoc:
    """``tally`` (None: a fresh one for the minute ``sweep`` ended in) with ``sweep`` added.

    Raises:
        ValueError: ``tally`` is another minute's.
    """
    minute = minute_of(sweep.at)
    base = tally or SweepTallyDoc(id=tally_id(minute), day=day_of(minute), at=minute)
    if base.at != minute:
        raise ValueError(f"sweep at {sweep.at.isoformat()} is not in the tally of {base.at.isoformat()}")
    latest = base.last_sweep_at is None or sweep.at >= base.last_sweep_at
    return base.model_copy(
        update={
            "sweeps": base.sweeps + 1,
            "recovered": base.recovered + sweep.recovered,
            "gave_up": base.gave_up + sweep.gave_up,
            "held": base.held + sweep.held,
            "stuck_max": max(base.stuck_max, sweep.stuck) if base.sweeps else sweep.stuck,
            "stuck_last": sweep.stuck if latest else base.stuck_last,
            "last_sweep_at": sweep.at if latest else base.last_sweep_at,
        }
    )


class ReplayDoc(Model):
    """The record of an operator's replay of one dead letter (kind :data:`REPLAY_KIND`), written once its
    message was re-sent: what a later replay of the same dead letter, finding it gone, reports, and what
    puts the replay's entry on the timeline of the order it is linked to once that order has a record
    (:mod:`orderflow.replays`).

    Attributes:
        id: :func:`replay_doc_id` of the queue and the dead letter id.
        day: The partition, :func:`day_of` ``at``.
        at: When the message was re-sent (UTC, the replaying host's clock).
        queue: The queue the dead letter was dead-lettered from and re-sent to.
        dead_letter_id: The dead-letter queue's id of it.
        replay_message_id: The id it was re-sent under.
        order_id: The order the dead letter is linked to (by the queue it arrived on, never by what the
            message says alone), or None: not linked, and no order's timeline is written.
        by: The replaying operator's audit id (the verified principal's).
        by_name: Their display name, for people to read.
        ttl: The document's own time-to-live, seconds.
    """

    id: str
    day: str
    kind: Literal["deadletter_replay"] = REPLAY_KIND
    at: UtcDatetime
    queue: str
    dead_letter_id: str
    replay_message_id: str
    order_id: str | None = None
    by: str
    by_name: str | None = None
    ttl: int = ALERT_TTL_S


def replay_doc_id(queue: str, dead_letter_id: str) -> str:
    """The id of the record of a replay of dead letter ``dead_letter_id`` of ``queue``:
    ``replay-<32 hex digits of a SHA-256 of both>`` (a queue name may hold characters an id may not)."""
    text = f"{queue}\n{dead_letter_id}".encode("utf-8", "surrogatepass")
    return "replay-" + hashlib.sha256(text).hexdigest()[:32]


def replay_filter(*, dead_letter_id: str | None, replay_message_id: str | None) -> tuple[str, str]:
    """The stored field (camelCase) and value a lookup of replay records matches, besides the queue:
    ``("deadLetterId", ...)`` or ``("replayMessageId", ...)``.

    Raises:
        ValueError: not exactly one of the two is given.
    """
    if dead_letter_id is not None and replay_message_id is None:
        return "deadLetterId", dead_letter_id
    if replay_message_id is not None and dead_letter_id is None:
        return "replayMessageId", replay_message_id
    raise ValueError("give exactly one of dead_letter_id and replay_message_id")
