"""An operator reads, replays and purges the dead letters of the deployment's queues.

Only the queues orderflow consumes are read (:func:`deployment_queues`, what ``GET queues`` lists): the
name in a request is checked against them, never opened as given. A replay re-sends the dead
letter's body, correlation id and reply-to to the queue it was dead-lettered from, under
:func:`replay_message_id` (a new id, so that broker duplicate detection does not drop it inside its
window), and then deletes the dead letter; the consumers' own idempotency by order and request id makes a
replay of something already done harmless (docs/operations.md#dead-letters). Every replay and purge is
an event naming the verified principal; a replay of a dead letter linked to an order (:func:`linked_order`:
from the queue it arrived on, never from what the message says alone) is also an entry on that order's
timeline.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.errors import ConcurrencyConflict, InvalidMessage, NotFound, OrderflowError
from orderflow.messages import decode_json_object, owned_order_key, validate_order_key
from orderflow.operator_auth import Principal
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN, DeadLetter, DeadLetterQueues, QueueFactory
from orderflow.settings import Settings
from orderflow.stores.base import StateStore
from orderflow.timeline import Actor, note
from orderflow.workflows import agent_names

logger = logging.getLogger(__name__)

UNKNOWN_QUEUE = "UnknownQueue"
"""Refusal: the queue is not one of the deployment's (404: nothing about it is said)."""
NO_SUCH_DEAD_LETTER = "NoSuchDeadLetter"

REPLAY_MARK = ":replay:"
MAX_MESSAGE_ID_CHARS = 128
"""Service Bus's limit on a ``MessageId``."""
_REPLAYED = re.compile(r"^(?P<base>.+):replay:(?P<n>[0-9]{1,6})$")
_DEAD_LETTER_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_TIMELINE_TRIES = 3


def replay_message_id(message_id: str) -> str:
    """The id a replay of a message sent as ``message_id`` goes under: ``<id>:replay:1``, and for a
    replay dead-lettered again ``<id>:replay:<n+1>``.

    Never the original id, which duplicate detection drops inside its window; the same for two replays
    of one dead letter, so that on Service Bus a second operator's replay of it is dropped as the
    duplicate it is. An id too long for 128 characters is replaced by its SHA-256 (40 hex digits).
    """
    found = _REPLAYED.fullmatch(message_id)
    base, n = (found["base"], int(found["n"])) if found else (message_id, 0)
    if len(base) + len(REPLAY_MARK) + 7 > MAX_MESSAGE_ID_CHARS:
        base = hashlib.sha256(base.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return f"{base}{REPLAY_MARK}{n + 1}"


def deployment_queue(settings: Settings, name: str) -> str:
    """``name``, if it is one of the queues :func:`deployment_queues` lists (what ``GET queues``
    answers): never a name that only looks like one, such as a made-up host's response queue or a
    ``-deadletter`` queue, which would be opened (and on Storage created) as given.

    Raises:
        InvalidMessage: ``UnknownQueue`` (the handler answers 404).
    """
    if all(queue.name != name for queue in deployment_queues(settings)):
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


def deployment_queues(settings: Settings) -> list[DeploymentQueue]:
    """The queues orderflow consumes, and so dead-letters on: every registered client's inbound queue (in
    ``CLIENTS`` order), every agent's request queue (sorted by agent), then the response queue and this
    host's own (``AGENT_RESPONSES_QUEUE``, ``AGENT_RESPONSES_QUEUE-<HOST_ID>`` locally). Each is one
    :meth:`Settings.is_deployment_queue` accepts; other hosts' response queues are not known here."""
    found = [DeploymentQueue(c.inbound_queue, "inbound", c.client_id) for c in settings.clients()]
    found += [DeploymentQueue(settings.agent_queue(a), "agent", a) for a in agent_names()]
    for name in dict.fromkeys((settings.AGENT_RESPONSES_QUEUE, settings.response_queue())):
        found.append(DeploymentQueue(name, "responses", None))
    return [queue for queue in found if settings.is_deployment_queue(queue.name)]


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


def linked_order(dead: DeadLetter, settings: Settings) -> str | None:
    """The key of the order a dead letter is provably about, or None: not linked.

    Only a message that arrived on a registered client's inbound queue is about an order, and only about
    one of that client's (the queue names the client; nothing in the message does): the order its body's
    ``orderId`` and its correlation id name, by the intake's rule
    (:func:`~orderflow.messages.owned_order_key`), when every one of them present names the same one.
    Another client's key, text that is not an order id, references that disagree, or a dead letter of an
    agent's or the response queue: not linked.
    """
    client = settings.clients().for_inbound_queue(dead.source_queue)
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


def replay_dead_letter(
    name: str,
    dead_letter_id: str,
    principal: Principal,
    *,
    dead_letters: DeadLetterQueues,
    queues: QueueFactory,
    states: StateStore,
    clock: Clock,
    settings: Settings,
) -> Replayed | None:
    """Re-send dead letter ``dead_letter_id`` of queue ``name`` to ``name`` and delete it.

    The re-send happens while the dead letter is held; it is deleted only once the send succeeded (a
    crash in between leaves both, and a second replay goes under the same id).

    Returns:
        What was done, or None: no such dead letter (or another operator is replaying it).

    Raises:
        InvalidMessage: ``UnknownQueue``.
        TransientError, PermanentError: a queue failed; the dead letter stays.
    """
    deployment_queue(settings, name)
    sent: list[str] = []

    def resend(dead: DeadLetter) -> None:
        message_id = replay_message_id(dead.message_id)
        queues.queue(name).send(
            dead.body, message_id=message_id, correlation_id=dead.correlation_id, reply_to=dead.reply_to
        )
        sent.append(message_id)

    removed = dead_letters.remove_dead_letters(
        name, lambda dead: dead.dead_letter_id == dead_letter_id, before=resend, most=1
    )
    if not removed:
        return None
    dead, order_id = removed[0], linked_order(removed[0], settings)
    telemetry.event(
        "operator.deadletter_replayed",
        queue=name,
        message_id=dead.message_id,
        replay_message_id=sent[0],
        reason=dead.reason,
        order_id=order_id,
        operator=principal.audit_id,
    )
    if order_id is not None:
        _note_replay(states, clock, order_id, principal, sent[0])
    return Replayed(dead, sent[0], order_id)


def _note_replay(
    states: StateStore, clock: Clock, order_id: str, principal: Principal, message_id: str
) -> None:
    """An entry on the order's timeline, if it has a record; best effort (the replay is done)."""
    actor = Actor("operator", principal.audit_id, principal.display_name or None)
    for _ in range(_TIMELINE_TRIES):
        try:
            found = states.get(validate_order_key(order_id))  # checked before any store call
            after = found.item.copied()
            note(found.item, after, actor, action="deadletter.replay", outcome=message_id, at=clock.now())
            states.replace(after, etag=found.etag)
            return
        except NotFound:
            return
        except ConcurrencyConflict:
            continue
        except OrderflowError as failed:
            logger.warning("replay of a dead letter of %s not on its timeline: %s", order_id, failed)
            return
    logger.warning("replay of a dead letter of %s not on its timeline: the record kept changing", order_id)


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
    settings: Settings,
) -> Purged:
    """Remove one dead letter of ``name`` by id, or every one dead-lettered before ``older_than``
    (exactly one of the two); with ``dry_run`` only list them.

    Raises:
        InvalidMessage: ``UnknownQueue``; ``InvalidValue`` when not exactly one of the two is given.
        TransientError, PermanentError: the queue failed (what was removed stays removed).
    """
    deployment_queue(settings, name)
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
        chosen = dead_letters.remove_dead_letters(name, select)
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
