"""The chaos driver as an operator, once the run is over: through the operator API the first devhost
process serves (with a token from the local issuer, as ``orderflow login`` gets one), it lists the
intruder's dead letters, replays its ``correlation_id`` attacks (:mod:`demo.intruder.attacks`) and reads the
stored alerts. What it was shown becomes an :class:`demo.intruder.effects.OperatorFindings` for
:func:`demo.intruder.effects.count_cross_client_effects`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import datetime
from functools import partial
from typing import Any

from demo.intruder.attacks import Attack, AttackKind
from demo.intruder.effects import OperatorFindings, StoredAlert
from devhost.local_issuer import LocalIssuer, ensure_signing_key
from operator_api.alerts import MAX_LIMIT
from orderflow.errors import NotFound, TransientError
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.records import order_key
from orderflow.stores.base import StateStore
from orderflow_client.operator_client import OperatorAnswer, OperatorApiClient

logger = logging.getLogger(__name__)

OPERATOR_NAME = "chaos-operator"
"""The local user the driver acts as."""

UNREACHABLE_RETRY_S = 30.0
"""Seconds a call is tried again while the API cannot be reached (its process restarting)."""

DEAD_LETTER_PAGE = 100
"""Dead letters per listing page (the API's most)."""


def operator_token() -> str:
    """A token of the local issuer for :data:`OPERATOR_NAME` with the operator role."""
    return LocalIssuer(ensure_signing_key()).mint(name=OPERATOR_NAME, roles=[OPERATOR_ROLE])


class OperatorSession:
    """An operator's calls, and what they showed.

    Args:
        api: The operator API's client.
        retry_s: Seconds a call is tried again while the API cannot be reached.

    Attributes:
        findings: What was shown so far (``victims_changed`` and the alerts are set by the driver).
    """

    def __init__(self, api: OperatorApiClient, *, retry_s: float = UNREACHABLE_RETRY_S) -> None:
        self.api = api
        self.retry_s = retry_s
        self.findings = OperatorFindings()

    def _answer(self, call: Callable[[], OperatorAnswer]) -> OperatorAnswer | None:
        """``call``'s answer, counted as failed unless 200; None (counted) when it stayed unreachable."""
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                answer = call()
            except TransientError as unreachable:
                if time.monotonic() < deadline:
                    time.sleep(1.0)
                    continue
                logger.warning("the operator API stayed unreachable: %s", unreachable)
                self.findings.failed_answers += 1
                return None
            if answer.status != 200 or answer.error_code is not None:
                logger.warning("operator API answered %s: %s", answer.status, answer.error_code)
                self.findings.failed_answers += 1
            return answer

    def dead_letters(self, queue: str) -> list[dict[str, Any]]:
        """Every dead letter of ``queue`` as the API lists it, page after page; each view's ``orderId``
        is kept in :attr:`findings`."""
        views: list[dict[str, Any]] = []
        for body in self._pages(partial(self.api.list_dead_letters, queue, limit=DEAD_LETTER_PAGE)):
            page = body.get("deadLetters") or []
            views += page
            self.findings.linked += [view.get("orderId") for view in page]
        return views

    def replay(self, queue: str, views: Iterable[Mapping[str, Any]], message_ids: Collection[str]) -> None:
        """Replay each dead letter of ``views`` whose message id is one of ``message_ids``; the answers'
        ``orderId`` values and replay message ids are kept in :attr:`findings`."""
        for view in views:
            message_id = view.get("messageId")
            if message_id not in message_ids:
                continue
            answer = self._answer(partial(self.api.replay_dead_letter, queue, str(view.get("deadLetterId"))))
            self.findings.replayed[str(message_id)] = None if answer is None else replayed_as(answer)
            if answer is not None and answer.status == 200:
                shown = answer.body.get("deadLetter") or {}
                self.findings.linked += [answer.body.get("orderId"), shown.get("orderId")]

    def alerts(self) -> list[StoredAlert]:
        """Every stored alert, newest first, in pages of :data:`operator_api.alerts.MAX_LIMIT`."""
        return [
            stored_alert(item)
            for body in self._pages(partial(self.api.list_alerts, limit=MAX_LIMIT))
            for item in body.get("alerts") or []
        ]

    def _pages(self, call: Callable[..., OperatorAnswer]) -> Iterator[dict[str, Any]]:
        """The body of each page ``call(continuation=...)`` answers, following ``continuation`` until a
        page has none or an answer is not a 200."""
        continuation: str | None = None
        while True:
            answer = self._answer(partial(call, continuation=continuation))
            if answer is None or answer.status != 200:
                return
            yield answer.body
            continuation = answer.body.get("continuation")
            if not continuation:
                return


def replayed_as(answer: OperatorAnswer) -> str | None:
    """The id a replay went under, as its answer says: a 200's ``replayMessageId``, or a 409
    ``AlreadyReplayed``'s ``error.replayed.replayMessageId`` (a retried call whose first one replayed);
    None when it says none. The id is the dead letter's own (``orderflow.replays.replay_message_id``),
    so it is read, never derived from the message id."""
    body: Mapping[str, Any] = answer.body
    if answer.status != 200:
        body = (body.get("error") or {}).get("replayed") or {}
    found = body.get("replayMessageId")
    return found if isinstance(found, str) else None


def stored_alert(item: Mapping[str, Any]) -> StoredAlert:
    """An alert of the API's listing (``GET /alerts``)."""
    client_id = (item.get("details") or {}).get("client_id")
    return StoredAlert(
        id=str(item["id"]),
        kind=str(item["kind"]),
        client_id=None if client_id is None else str(client_id),
        count=int(item["count"]),
        first_seen=datetime.fromisoformat(str(item["firstSeen"])),
    )


def replayed_victims(attacks: Iterable[Attack]) -> list[tuple[str, str]]:
    """The victim orders the ``correlation_id`` attacks name, as ``(clientId, orderId)``."""
    return sorted({(a.victim, a.order_id) for a in attacks if a.kind is AttackKind.CORRELATION_ID})


def victim_etags(states: StateStore, victims: Iterable[tuple[str, str]]) -> dict[str, str | None]:
    """The ETag of each victim's record, by its key (None: no record)."""
    etags: dict[str, str | None] = {}
    for client_id, order_id in victims:
        key = order_key(client_id, order_id)
        try:
            etags[key] = states.get(key).etag
        except NotFound:
            etags[key] = None
    return etags
