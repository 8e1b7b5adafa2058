"""The operator API's bodies and answers as pydantic models: what the handler reads and writes, and what
the OpenAPI document (:mod:`operator_api.openapi`) is generated from."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from orderflow.messages import CleanText, Envelope
from orderflow.records import TimelineEntry


class ReviewBody(Envelope):
    """The body of ``POST .../review``: the decision. Unknown fields are refused."""

    decision: Literal["approve", "reject"]


class CompensateBody(Envelope):
    """The body of ``POST .../compensate``: why, optionally. Unknown fields are refused."""

    reason: CleanText | None = None


class EmptyBody(Envelope):
    """The body of ``suspend``, ``resume`` and a dead letter's ``replay``: nothing, or ``{}``."""


class ResubmitBody(Envelope):
    """The body of ``POST .../resubmit``: nothing, ``{}``, or ``{"input": {...}}``: corrected input for
    the failed step of an ``Error`` order, by the submitted order's field names (``{"carrier": "UPS"}``),
    at least one (docs/operator-api.md)."""

    # Left out, there is no input; given, it is an object: null is refused like any other non-object, so
    # that a body meant to correct never runs as a plain resubmit (and the document offers no null).
    input: SkipJsonSchema[None] | Annotated[dict[str, Any], Field(min_length=1, max_length=16)] = None

    @field_validator("input", mode="before")
    @classmethod
    def _given_means_an_object(cls, value: object) -> object:
        if value is None:
            raise ValueError("input must be a JSON object of fields, not null (leave it out for no input)")
        return value


class PurgeBody(Envelope):
    """The body of ``POST /deadletters/{queue}/purge``: one dead letter by id, or all dead-lettered
    before a time; ``dryRun`` lists them and removes nothing."""

    dead_letter_id: str | None = None
    older_than: AwareDatetime | None = None
    dry_run: bool = False


class Answer(BaseModel):
    """Base of the answers: camelCase JSON."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    def to_body(self) -> dict[str, Any]:
        """The JSON body."""
        return self.model_dump(mode="json", by_alias=True)


class PreviousReplay(Answer):
    """The replay that removed a dead letter another replay then found gone (``409 AlreadyReplayed``):
    the operator's audit id and display name, when, the id it was re-sent under, its linked order."""

    by: str
    by_name: str | None
    at: datetime
    replay_message_id: str
    order_id: str | None


class ErrorDetail(Answer):
    """What a refusal says: a code to act on and a message for people; ``replayed`` only on
    ``409 AlreadyReplayed``."""

    code: str
    message: str
    replayed: PreviousReplay | None = None


class ErrorAnswer(Answer):
    """Every refusal: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


class OrderSummary(Answer):
    """One order in a list (``GET /orders``)."""

    order_id: str
    client_id: str
    process_state: str
    workflow_version: str
    attempt: int
    failure_count: int
    locked_by: str | None
    suspended: bool
    last_error_code: str | None
    updated_at: str
    etag: str
    """The version listed, as an HTTP entity tag (the ``ETag`` of ``GET /orders/{orderId}`` at that
    version): the ``If-Match`` of an action on the order as it was listed."""


class OrderList(Answer):
    """A page of orders; ``continuation`` is None on the last page."""

    orders: list[OrderSummary]
    continuation: str | None


class TimelinePage(Answer):
    """A page of an order's timeline, oldest first; the last page (``continuation`` None) ends with the
    entries the record itself holds."""

    order_id: str
    entries: list[TimelineEntry]
    continuation: str | None


class ActionAnswer(Answer):
    """An accepted compensate, resubmit, suspend or resume: what it set in motion and the order as
    written (the ``order`` object is the view of ``GET /orders/{orderId}``)."""

    order_id: str
    outcome: str
    order: dict[str, Any]


class ReviewAnswer(Answer):
    """An accepted review: the decision in force, who made it, the order as written."""

    order_id: str
    decision: str
    decided_by: str | None
    order: dict[str, Any]


class DeadLetterAnswer(Answer):
    """A dead letter: its ids, why it was dead-lettered, and its body as it was (``deadLetterId`` names
    it in ``show``, ``replay`` and ``purge``). ``orderId`` is the order it is linked to: only one of the
    client's whose inbound queue it arrived on, that the message names; null when it is not linked
    (``correlationId`` is what the sender wrote, proof of nothing)."""

    dead_letter_id: str
    message_id: str
    queue: str
    reason: str
    description: str
    delivery_count: int
    dead_lettered_at: datetime
    correlation_id: str | None
    order_id: str | None
    body: str


class QueueAnswer(Answer):
    """A deployment queue whose dead letters may be read: ``kind`` ``inbound`` (``owner`` the client id),
    ``agent`` (``owner`` the agent) or ``responses`` (no owner)."""

    name: str
    kind: Literal["inbound", "agent", "responses"]
    owner: str | None


class QueueList(Answer):
    """The deployment's queues (``GET /queues``): inbound queues, agent request queues, response queues."""

    queues: list[QueueAnswer]


class DeadLetterList(Answer):
    """A page of a queue's dead letters, oldest first; ``continuation`` is None on the last page."""

    queue: str
    dead_letters: list[DeadLetterAnswer]
    continuation: str | None


class ReplayAnswer(Answer):
    """A replay done: the dead letter (deleted), the id it was re-sent under, the order it is linked to
    (null: not linked, and no order's timeline was written)."""

    queue: str
    replay_message_id: str
    order_id: str | None
    replayed_by: str
    dead_letter: DeadLetterAnswer


class PurgeAnswer(Answer):
    """What a purge removed, or in a dry run would remove."""

    queue: str
    dry_run: bool
    count: int
    dead_letters: list[DeadLetterAnswer]


class AlertAnswer(Answer):
    """A stored operator alert (``GET /alerts``): its kind, the order and instance it is about, why, and
    the suggested action of its kind; how many times it was raised, first and last (``at`` is the last:
    the alerts of a kind a client can raise are counted per client and window, docs/operations.md)."""

    id: str
    kind: str
    at: datetime
    host: str | None
    order_id: str | None
    instance_id: str | None
    cause: str
    suggested_action: str
    details: dict[str, str | int | float | bool]
    count: int
    first_seen: datetime
    last_seen: datetime


class AlertList(Answer):
    """A page of alerts, newest first; ``continuation`` is None on the last page."""

    alerts: list[AlertAnswer]
    continuation: str | None


class SweepAnswer(Answer):
    """One supervisor sweep, as its status document says."""

    at: datetime
    host: str
    leadership: str
    scanned: int
    recovered: int
    gave_up: int
    held: int
    stuck: int
    duration_s: float
    complete: bool


class SupervisorStatus(Answer):
    """``GET /supervisor``: who sweeps, the latest sweeps (newest first) and the stuck-orders gauge.

    ``leader`` is the host of the newest sweep and ``stuckOrders`` its count, both None when no sweep
    was recorded within ``staleAfterS`` seconds; ``leadership`` is ``lease`` (a local supervisor holding
    the lease) or ``timer (singleton)`` (the Azure timer trigger).
    """

    leadership: str | None
    leader: str | None
    last_sweep_at: datetime | None
    stuck_orders: int | None
    stale_after_s: float
    sweeps: list[SweepAnswer]


class ActivityBucket(Answer):
    """One bucket of ``GET /activity``: what happened from ``start`` (included) for ``bucketS`` seconds.

    ``deadLetters`` is None on a host that reads no dead-letter queues; ``stuckOrders`` (the largest
    stuck-orders count a sweep in the bucket found) is None when no sweep was tallied in it.
    """

    start: datetime
    alerts: int
    alerts_by_kind: dict[str, int]
    dead_letters: int | None
    recoveries: int
    gave_up: int
    sweeps: int
    stuck_orders: int | None


class ActivityCompleteness(Answer):
    """Per series, whether its bounded read reached the end (False: the counts are lower bounds)."""

    alerts: bool
    sweeps: bool
    dead_letters: bool | None


class ActivityAnswer(Answer):
    """``GET /activity``: the window ``[since, until)`` in ``bucketS``-second buckets, oldest first."""

    since: datetime
    until: datetime
    bucket_s: int
    buckets: list[ActivityBucket]
    complete: ActivityCompleteness


class ConsoleConfig(Answer):
    """``GET /console-config`` (no token): how the web console signs operators in. All three None: only
    a pasted token (``CONSOLE_CLIENT_ID`` unset). Nothing here is a secret: a public client has none."""

    authority: str | None
    client_id: str | None
    scope: str | None
