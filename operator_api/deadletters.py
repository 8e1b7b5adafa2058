"""An operator reads, replays and purges the dead letters of the deployment's queues.

Only the queues orderflow consumes are read (:func:`deployment_queues`, what ``GET queues`` lists): the
name in a request is checked against them, never opened as given. A replay re-sends the dead letter's
body, correlation id and reply-to to the queue it was dead-lettered from, under :func:`replay_message_id`
(an id of that dead letter's own, so that broker duplicate detection drops neither it nor a replay of
another dead letter of the same message), and then deletes the dead letter; the consumers' own idempotency
by order and request id makes a replay of something already done harmless
(docs/operations.md#dead-letters). Every replay and purge is an event naming the verified principal, and
so is a replay that found its dead letter gone: it reads the record the replay that removed it left
(:mod:`orderflow.replays`) and answers whose it was and when. A replay of a dead letter linked to an order
(:func:`linked_order`: from the queue it arrived on, never from what the message says alone) is also an
entry on that order's timeline, once the order has a record.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from orderflow import telemetry
from orderflow.alerts import ALERT_TTL_S, ReplayDoc
from orderflow.clock import Clock
from orderflow.errors import InvalidMessage, OrderflowError
from orderflow.messages import decode_json_object, owned_order_key
from orderflow.operator_auth import Principal
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN, DeadLetter, DeadLetterQueues, QueueFactory
from orderflow.replays import note_replay, replay_message_id, replay_record
from orderflow.settings import Clients, Queues, Supervisor
from orderflow.stores.base import ReplayRecords, StateStore
from orderflow.workflows import agent_names

logger = logging.getLogger(__name__)

UNKNOWN_QUEUE = "UnknownQueue"
"""Refusal: the queue is not one of the deployment's (404: nothing about it is said)."""
NO_SUCH_DEAD_LETTER = "NoSuchDeadLetter"

ALREADY_REPLAYED = "AlreadyReplayed"
"""Refusal: the dead letter is gone because a replay removed it (409, saying whose and when)."""
_DEAD_LETTER_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def deployment_queue(clients: Clients, queue_names: Queues, name: str) -> str:
    """``name``, if it is one of the queues :func:`deployment_queues` lists (what ``GET queues``
    answers): never a name that only looks like one, such as a made-up host's response queue or a
    ``-deadletter`` queue, which would be opened (and on Storage created) as given.

    Raises:
        InvalidMessage: ``UnknownQueue`` (the handler answers 404).
    """
    if all(queue.name != name for queue in deployment_queues(clients, queue_names)):
        raise InvalidMessage(UNKNOWN_QUEUE, "no such queue in this deployment (see GET queues)")
    return name


QueueKind = Literal["inbound", "agent", "responses"]
"""What a deployment queue is for: a client's inbound queue, an agent's request queue, a response queue."""


@dataclass(frozen=True)
class DeploymentQueue:
    """One queue of the deployment whose dead letters an operator may read: its name, what it is for and
    whose it is (the client id of an inbound queue, the agent of a request queue, else None)."""

    name: str
    kind: QueueKind
    owner: str | None


def deployment_queues(clients: Clients, queue_names: Queues) -> list[DeploymentQueue]:
    """The queues orderflow consumes, and so dead-letters on: every registered client's inbound queue (in
    ``CLIENTS`` order), every agent's request queue (sorted by agent), then the response queue and this
    host's own (``AGENT_RESPONSES_QUEUE``, ``AGENT_RESPONSES_QUEUE-<HOST_ID>`` locally). Each is one
    :meth:`orderflow.settings.Clients.is_deployment_queue` accepts; other
    hosts' response queues are not known here."""
    found = [DeploymentQueue(c.inbound_queue, "inbound", c.client_id) for c in clients.clients()]
    found += [DeploymentQueue(queue_names.agent_queue(a), "agent", a) for a in agent_names()]
    for name in dict.fromkeys((queue_names.AGENT_RESPONSES_QUEUE, queue_names.response_queue())):
        found.append(DeploymentQueue(name, "responses", None))
    return [queue for queue in found if clients.is_deployment_queue(queue.name)]


def validate_dead_letter_id(text: str) -> str:
    """A dead letter's id as the transports give them (a Storage GUID, a sequence number).

    Raises:
        InvalidMessage: ``InvalidValue``.
    """
    if not _DEAD_LETTER_ID.fullmatch(text):
        raise InvalidMessage("InvalidValue", "a dead letter id: 1-64 letters, digits and hyphens")
    return text


def every_dead_letter(dead_letters: DeadLetterQueues, name: str) -> list[DeadLetter]:
    """The dead letters of ``name``, oldest first, at most :data:`MAX_DEAD_LETTER_SCAN`."""
    found: list[DeadLetter] = []
    continuation: str | None = None
    while len(found) < MAX_DEAD_LETTER_SCAN:
        page = dead_letters.dead_letter_page(name, max_messages=100, continuation=continuation)
        found += page.items
        continuation = page.continuation
        if continuation is None:
            break
    return found[:MAX_DEAD_LETTER_SCAN]


def find_dead_letter(dead_letters: DeadLetterQueues, name: str, dead_letter_id: str) -> DeadLetter | None:
    """The dead letter ``dead_letter_id`` of ``name``, or None."""
    return next(
        (d for d in every_dead_letter(dead_letters, name) if d.dead_letter_id == dead_letter_id), None
    )


def linked_order(dead: DeadLetter, clients: Clients) -> str | None:
    """The key of the order a dead letter is provably about, or None: not linked.

    Only a message that arrived on a registered client's inbound queue is about an order, and only about
    one of that client's (the queue names the client; nothing in the message does): the order its body's
    ``orderId`` and its correlation id name, by the intake's rule
    (:func:`~orderflow.messages.owned_order_key`), when every one of them present names the same one.
    Another client's key, text that is not an order id, references that disagree, or a dead letter of an
    agent's or the response queue: not linked.
    """
    client = clients.clients().for_inbound_queue(dead.source_queue)
    if client is None:
        return None
    # An empty correlation id is none at all (Service Bus and Storage envelopes carry "" or null alike).
    references = [ref for ref in (_body_order_id(dead.body), dead.correlation_id or None) if ref is not None]
    keys = {owned_order_key(client.client_id, ref) if isinstance(ref, str) else None for ref in references}
    return keys.pop() if len(keys) == 1 else None


def _body_order_id(body: str) -> object:
    """The ``orderId`` of a body that is a JSON object holding one (of any type), else None."""
    try:
        return decode_json_object(body).get("orderId")
    except InvalidMessage:
        return None


@dataclass(frozen=True)
class Replayed:
    """A replay done: the dead letter (now deleted), the id it was re-sent under, the order it is linked
    to (:func:`linked_order`; None: not linked)."""

    dead_letter: DeadLetter
    message_id: str
    order_id: str | None


@dataclass(frozen=True)
class NotReplayed:
    """A replay that found no dead letter: ``AlreadyReplayed`` with the record of the replay that removed
    it (who, when, under which id), or ``NoSuchDeadLetter`` when no replay of it is on record (it never
    was, was purged, or its record expired)."""

    reason: str
    previous: ReplayDoc | None = None


def replay_dead_letter(
    name: str,
    dead_letter_id: str,
    principal: Principal,
    *,
    dead_letters: DeadLetterQueues,
    queues: QueueFactory,
    states: StateStore,
    replays: ReplayRecords | None,
    clock: Clock,
    clients: Clients,
    queue_names: Queues,
    supervisor: Supervisor,
) -> Replayed | NotReplayed:
    """Re-send dead letter ``dead_letter_id`` of queue ``name`` to ``name`` and delete it; either way an
    event names the verified principal and what came of it.

    The re-send happens while the dead letter is held; the replay record
    (:func:`orderflow.replays.replay_record`, kept ``DEAD_LETTER_RETENTION_S``) is written once the send
    succeeded, and the dead letter deleted after that (a crash in between leaves the dead letter, and a
    second replay goes under the same id). A replay that then finds the dead letter gone reads that record.

    Args:
        replays: Where replay records are kept; None: none are (a replay that finds no dead letter is
            then ``NoSuchDeadLetter``, and a replayed order's entry is written only if it has a record).

    Returns:
        What was done, or why nothing was.

    Raises:
        InvalidMessage: ``UnknownQueue``.
        TransientError, PermanentError: a queue or the replay records failed; the dead letter stays.
    """
    deployment_queue(clients, queue_names, name)
    done: list[ReplayDoc] = []

    def resend(dead: DeadLetter) -> None:
        message_id = replay_message_id(dead.message_id, queue=name, dead_letter_id=dead.dead_letter_id)
        queues.queue(name).send(
            dead.body, message_id=message_id, correlation_id=dead.correlation_id, reply_to=dead.reply_to
        )
        record = replay_record(
            name,
            dead.dead_letter_id,
            replay_id=message_id,
            order_id=linked_order(dead, clients),
            by=principal.audit_id,
            by_name=principal.display_name,
            at=clock.now(),
            ttl_s=_record_ttl_s(supervisor),
        )
        if replays is not None:
            replays.put_replay(record)  # before the deletion: whoever finds the dead letter gone finds this
        done.append(record)

    removed = dead_letters.remove_dead_letters(
        name, lambda dead: dead.dead_letter_id == dead_letter_id, before=resend, most=1
    )
    if not removed:
        return _not_replayed(name, dead_letter_id, principal, replays)
    dead, record = removed[0], done[0]
    telemetry.event(
        "operator.deadletter_replayed",
        queue=name,
        message_id=dead.message_id,
        replay_message_id=record.replay_message_id,
        reason=dead.reason,
        order_id=record.order_id,
        operator=principal.audit_id,
    )
    _note(states, record)
    return Replayed(dead, record.replay_message_id, record.order_id)


def _record_ttl_s(supervisor: Supervisor) -> int:
    """How long a replay record is kept: as long as a dead letter (the alerts' when dead letters are kept
    for ever)."""
    return math.ceil(supervisor.DEAD_LETTER_RETENTION_S) or ALERT_TTL_S


def _not_replayed(
    name: str, dead_letter_id: str, principal: Principal, replays: ReplayRecords | None
) -> NotReplayed:
    """The refusal of a replay that found no dead letter ``dead_letter_id``, recorded as an
    ``operator.refused`` event naming the principal and, when on record, the replay that won; recorded
    too (reason ``Unavailable``) when the records cannot be read.

    Raises:
        TransientError: the replay records are unavailable.
    """
    previous: ReplayDoc | None = None
    reason = "Unavailable"
    try:
        found = replays.find_replays(name, dead_letter_id=dead_letter_id) if replays is not None else []
        previous = found[0] if found else None
        reason = NO_SUCH_DEAD_LETTER if previous is None else ALREADY_REPLAYED
    finally:
        telemetry.event(
            "operator.refused",
            action="deadletter.replay",
            queue=name,
            dead_letter_id=dead_letter_id,
            operator=principal.audit_id,
            reason=reason,
            replayed_by=None if previous is None else previous.by,
            replayed_at=None if previous is None else previous.at,
            replay_message_id=None if previous is None else previous.replay_message_id,
            order_id=None if previous is None else previous.order_id,
        )
    return NotReplayed(reason, previous)


def _note(states: StateStore, record: ReplayDoc) -> None:
    """The replay's entry on its order's timeline, if the order has a record; best effort (the replay is
    done, and the intake writes the entry when it takes the re-sent order in)."""
    try:
        note_replay(states, record)
    except OrderflowError as failed:
        logger.warning("replay of a dead letter of %s not on its timeline yet: %s", record.order_id, failed)


@dataclass(frozen=True)
class Purged:
    """What a purge removed (or, in a dry run, would remove)."""

    dead_letters: list[DeadLetter]
    dry_run: bool


def purge_dead_letters(
    name: str,
    principal: Principal,
    *,
    dead_letter_id: str | None,
    older_than: datetime | None,
    dry_run: bool,
    dead_letters: DeadLetterQueues,
    clients: Clients,
    queue_names: Queues,
) -> Purged:
    """Remove one dead letter of ``name`` by id, or every one dead-lettered before ``older_than``
    (exactly one of the two); with ``dry_run`` only list them.

    Raises:
        InvalidMessage: ``UnknownQueue``; ``InvalidValue`` when not exactly one of the two is given.
        TransientError, PermanentError: the queue failed (what was removed stays removed).
    """
    deployment_queue(clients, queue_names, name)
    if (dead_letter_id is None) == (older_than is None):
        raise InvalidMessage("InvalidValue", "give one of deadLetterId and olderThan")
    select: Callable[[DeadLetter], bool] = (
        (lambda dead: dead.dead_letter_id == dead_letter_id)
        if dead_letter_id is not None
        else (lambda dead: older_than is not None and dead.dead_lettered_at < older_than)
    )
    if dry_run:
        chosen = [dead for dead in every_dead_letter(dead_letters, name) if select(dead)]
    else:
        # An id names one dead letter: the scan stops at it, holding no more of the queue than it must.
        chosen = dead_letters.remove_dead_letters(
            name, select, most=1 if dead_letter_id is not None else None
        )
    telemetry.event(
        "operator.deadletter_purged",
        queue=name,
        count=len(chosen),
        dry_run=dry_run,
        dead_letter_id=dead_letter_id,
        older_than=older_than,
        operator=principal.audit_id,
    )
    return Purged(chosen, dry_run)
