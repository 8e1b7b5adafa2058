"""A dead letter's replay as orderflow keeps it: the message id it is re-sent under, the record the
replay leaves (:class:`~orderflow.alerts.ReplayDoc`) and its entry on the timeline of the order the dead
letter is linked to.

A replayed order often has no state record yet when the replay answers: the intake creates it when it
takes the re-sent message in. So the entry is written by whichever of the two comes second, each only if
the record does not hold it already (:func:`note_replay`):

- the replay, once its record is written, if the order has a state record then;
- the intake, once it has recorded the order of a message re-sent under a replay id, for each replay
  record of that message that is linked to that very order (:func:`note_replayed_message`).

The replay writes its record before it reads the order, and the intake writes the order before it reads
the replay records, so at least one of them sees the other's write: the entry is never lost, and it goes
only to the order the replay record names, which the operator API linked by the queue the dead letter
arrived on, never by what the message says (docs/operator-api.md#dead-letter-queues).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from orderflow.alerts import ReplayDoc, day_of, replay_doc_id
from orderflow.errors import ConcurrencyConflict, NotFound
from orderflow.messages import MAX_MESSAGE_ID_CHARS, validate_order_key
from orderflow.protocol.conditional import Note, update
from orderflow.records import StateRecord
from orderflow.stores.base import ReplayRecords, StateStore
from orderflow.timeline import Actor

REPLAY_ACTION = "deadletter.replay"
"""The ``action`` of a replay's timeline entry; its ``outcome`` is the replay message id."""

REPLAY_MARK = ":replay:"
REPLAY_DIGEST_CHARS = 16
"""Hex digits of the dead letter's digest that ends a replay message id (64 bits)."""
_REPLAYED = re.compile(rf"^(?P<base>.*){REPLAY_MARK}[0-9a-f]{{{REPLAY_DIGEST_CHARS}}}$")
_NOTE_TRIES = 3


def replay_message_id(message_id: str, *, queue: str, dead_letter_id: str) -> str:
    """The id a replay of dead letter ``dead_letter_id`` of ``queue``, sent as ``message_id``, goes under:
    ``<id>:replay:<digest>``, the digest (:data:`REPLAY_DIGEST_CHARS` hex digits of a SHA-256) of the
    queue and the dead letter id; a replay's own ``:replay:<digest>`` is dropped from ``<id>`` first.

    Never the original id, which duplicate detection drops inside its window. The same for two replays of
    one dead letter, so that on Service Bus the second of them is dropped as the duplicate it is; another
    for every other dead letter, even of the same message id, and not one a sender can claim first
    without knowing the dead letter's id (docs/operations.md#dead-letters). ``<id>`` is cut to fit
    :data:`MAX_MESSAGE_ID_CHARS`.
    """
    found = _REPLAYED.fullmatch(message_id)
    base = found["base"] if found else message_id
    # The line feed keeps the two apart: a queue name never holds one.
    digest = hashlib.sha256(f"{queue}\n{dead_letter_id}".encode()).hexdigest()[:REPLAY_DIGEST_CHARS]
    return f"{_cut(base, MAX_MESSAGE_ID_CHARS - len(REPLAY_MARK) - REPLAY_DIGEST_CHARS)}{REPLAY_MARK}{digest}"


def _cut(text: str, units: int) -> str:
    """The longest prefix of ``text`` of at most ``units`` UTF-16 code units (what Service Bus counts)."""
    cut = text[:units]
    while len(cut.encode("utf-16-le", "surrogatepass")) > 2 * units:
        cut = cut[:-1]
    return cut


def is_replay_message_id(message_id: str | None) -> bool:
    """Whether ``message_id`` has the form of a replay's (:func:`replay_message_id`). A sender may choose
    such an id too: it only makes the intake look for replay records, which it then finds none of."""
    return message_id is not None and _REPLAYED.fullmatch(message_id) is not None


def replay_record(
    queue: str,
    dead_letter_id: str,
    *,
    replay_id: str,
    order_id: str | None,
    by: str,
    by_name: str | None,
    at: datetime,
    ttl_s: int,
) -> ReplayDoc:
    """The record of a replay of dead letter ``dead_letter_id`` of ``queue``, re-sent at ``at`` (UTC)
    under ``replay_id``, by the operator whose audit id is ``by``, kept ``ttl_s`` seconds."""
    return ReplayDoc(
        id=replay_doc_id(queue, dead_letter_id),
        day=day_of(at),
        at=at,
        queue=queue,
        dead_letter_id=dead_letter_id,
        replay_message_id=replay_id,
        order_id=order_id,
        by=by,
        by_name=by_name or None,
        ttl=ttl_s,
    )


def note_replay(states: StateStore, replay: ReplayDoc) -> bool:
    """Put ``replay``'s entry (action :data:`REPLAY_ACTION`, by the replaying operator, at the replay's
    time) on the timeline of the order it is linked to, unless the record holds it already.

    Returns:
        True when the record holds the entry (written now or before); False when the replay is linked to
        no order or the order has no state record yet.

    Raises:
        ConcurrencyConflict: the record kept changing (:data:`_NOTE_TRIES` reads and writes).
        TransientError: the store is unavailable.
    """
    if replay.order_id is None:
        return False
    key = validate_order_key(replay.order_id)  # checked before any store call
    actor = Actor("operator", replay.by, replay.by_name)

    def add(record: StateRecord) -> StateRecord | None:
        if any(_is_entry_of(entry.action, entry.outcome, entry.at, replay) for entry in record.timeline):
            return None
        return record  # the write notes the entry

    try:
        update(
            states,
            key,
            add,
            clock=None,
            actor=Note(actor, action=REPLAY_ACTION, outcome=replay.replay_message_id, at=replay.at),
            attempts=_NOTE_TRIES,
            housekeeping=True,
        )
    except NotFound:
        return False
    except ConcurrencyConflict:
        raise ConcurrencyConflict(
            f"the timeline of {key} kept changing while a replay was noted on it"
        ) from None
    return True


def _is_entry_of(action: str | None, outcome: str | None, at: datetime, replay: ReplayDoc) -> bool:
    return (action, outcome, at) == (REPLAY_ACTION, replay.replay_message_id, replay.at)


def note_replayed_message(
    replays: ReplayRecords, states: StateStore, *, queue: str, message_id: str | None, order_id: str
) -> int:
    """After the intake recorded order ``order_id`` from a message of ``queue`` sent as ``message_id``:
    the entry of each replay that re-sent that message and is linked to that order (:func:`note_replay`).
    A message id not of a replay's form costs nothing.

    Returns:
        How many replays' entries the record holds now.

    Raises:
        ConcurrencyConflict, TransientError: as :func:`note_replay` (and a failed lookup); the intake
            lets them propagate, so that the message is taken in again and the entry written then.
    """
    if not is_replay_message_id(message_id):
        return 0
    found = replays.find_replays(queue, replay_message_id=message_id)
    return sum(note_replay(states, replay) for replay in found if replay.order_id == order_id)
