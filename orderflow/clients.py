"""The client registry: who may submit orders, on which queue, and where their replies go.

A client is identified by what it cannot forge: the queue its message arrived on. Each registered client
sends only to its own inbound queue (``orders-<id>`` by default) and reads only its own reply queue
(``replies-<id>``); on Azure its identity holds send rights on the one and receive rights on the other,
locally a SAS scoped to each (docs/clients.md). The submission path takes the :class:`RegisteredClient`
from the host (the queue it consumed), never from the message body, and the reply queue from the
registry, never from the body.

The registry comes from the ``CLIENTS`` setting, a JSON list (:func:`parse_clients`)::

    [{"id": "acme", "maxInFlight": 500, "principalId": "<Entra object id>"},
     {"id": "globex", "inboundQueue": "globex-in", "replyQueue": "globex-out"}]

This module imports nothing else of orderflow: :mod:`orderflow.settings` validates the registry
against the queues orderflow reserves for itself and passes the check in as a function.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orderflow.entra_ids import canonical_guid

CLIENT_ID_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$"
"""A client id: a slug of 1-32 lowercase letters, digits and single inner hyphens (it names queues)."""

_QUEUE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?!-)){1,50}[a-z0-9]$")
"""Queue names valid on Storage queues and Service Bus, short enough for ``<name>-deadletter``
(the rule of :data:`orderflow.messages.QueueName`)."""

DEFAULT_INBOUND_PREFIX = "orders-"
"""A client's inbound queue is ``orders-<id>`` unless the registry names another."""

DEFAULT_REPLY_PREFIX = "replies-"
"""A client's reply queue is ``replies-<id>`` unless the registry names another."""


def _queue_name(value: str) -> str:
    if not _QUEUE_NAME.fullmatch(value):
        raise ValueError(
            f"{value[:64]!r} is not a valid queue name: 3-52 lowercase letters, digits and single hyphens"
        )
    return value


class RegisteredClient(BaseModel):
    """One registered client.

    Attributes:
        client_id: A short slug (``acme``); recorded as ``clientId`` on its orders.
        inbound_queue: The only queue it sends orders and cancels to (default ``orders-<id>``).
        reply_queue: Its private reply queue (default ``replies-<id>``); every reply to it goes there.
        max_in_flight: Its own ceiling on orders in flight (Pending + Processing); None: only the global
            ``MAX_IN_FLIGHT_ORDERS`` applies.
        principal_id: The object id of the client's service principal (a GUID: the ``oid`` of its
            tokens), for role assignments and the operator API's rule that nobody approves their own
            order; None when the client has none.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    client_id: str = Field(alias="id", pattern=CLIENT_ID_PATTERN)
    inbound_queue: str = Field("", alias="inboundQueue")
    reply_queue: str = Field("", alias="replyQueue")
    max_in_flight: int | None = Field(None, alias="maxInFlight", ge=1)
    principal_id: str | None = Field(None, alias="principalId")

    @model_validator(mode="after")
    def _default_queues(self) -> RegisteredClient:
        # Frozen: defaults derived from the id are set once, here.
        if not self.inbound_queue:
            object.__setattr__(self, "inbound_queue", f"{DEFAULT_INBOUND_PREFIX}{self.client_id}")
        if not self.reply_queue:
            object.__setattr__(self, "reply_queue", f"{DEFAULT_REPLY_PREFIX}{self.client_id}")
        _queue_name(self.inbound_queue)
        _queue_name(self.reply_queue)
        if self.inbound_queue == self.reply_queue:
            raise ValueError(f"client {self.client_id!r}: its inbound and reply queues are the same queue")
        return self

    @field_validator("client_id")
    @classmethod
    def _single_hyphens(cls, value: str) -> str:
        if "--" in value:
            raise ValueError("a client id has single hyphens only (it names queues)")
        return value

    @field_validator("principal_id")
    @classmethod
    def _principal_is_a_guid(cls, value: str | None) -> str | None:
        # Kept in Entra's form, whatever form it was written in: it is compared with tokens' oid.
        if value is None:
            return None
        try:
            return canonical_guid(value)
        except ValueError:
            raise ValueError(
                "principalId should be the Entra object id of the client's app, a GUID"
            ) from None

    def __repr__(self) -> str:
        return (
            f"RegisteredClient(client_id={self.client_id!r}, inbound_queue={self.inbound_queue!r}, "
            f"reply_queue={self.reply_queue!r})"
        )

    def owns(self, client_id: str) -> bool:
        """Whether an order recorded with ``client_id`` is this client's: the id is the only proof of
        ownership, never the reply queue the order answers on (its body names that queue)."""
        return client_id == self.client_id


class ClientRegistry:
    """The registered clients, looked up by inbound queue and by id.

    Args:
        clients: The clients.
        reserved: What a queue name is among orderflow's own queues, or None
            (:meth:`orderflow.settings.Queues.reserved_queue`).

    Raises:
        ValueError: two clients share an id or a queue (one's reply queue is another's inbound, two
            share a reply queue ...), or a client's queue is one orderflow reserves.
    """

    def __init__(
        self, clients: Iterable[RegisteredClient], *, reserved: Callable[[str], str | None] = lambda _: None
    ) -> None:
        self._by_id: dict[str, RegisteredClient] = {}
        self._by_inbound: dict[str, RegisteredClient] = {}
        owners: dict[str, str] = {}
        for client in clients:
            if client.client_id in self._by_id:
                raise ValueError(f"client id {client.client_id!r} is registered twice")
            for role, queue in (("inbound", client.inbound_queue), ("reply", client.reply_queue)):
                if queue in owners:
                    raise ValueError(
                        f"client {client.client_id!r}: its {role} queue {queue!r} is already {owners[queue]}"
                    )
                what = reserved(queue)
                if what is not None:
                    raise ValueError(f"client {client.client_id!r}: its {role} queue {queue!r} is {what}")
                owners[queue] = f"the {role} queue of client {client.client_id!r}"
            self._by_id[client.client_id] = client
            self._by_inbound[client.inbound_queue] = client

    def __repr__(self) -> str:
        return f"ClientRegistry(clients={sorted(self._by_id)})"

    def __iter__(self) -> Iterator[RegisteredClient]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, client_id: str) -> RegisteredClient:
        """The client with id ``client_id``.

        Raises:
            KeyError: no such client.
        """
        return self._by_id[client_id]

    def for_inbound_queue(self, queue: str) -> RegisteredClient | None:
        """The client whose inbound queue is ``queue``, or None."""
        return self._by_inbound.get(queue)

    def is_reply_queue(self, queue: str) -> bool:
        """Whether ``queue`` is some registered client's reply queue."""
        return any(client.reply_queue == queue for client in self._by_id.values())


def parse_clients(text: str) -> tuple[RegisteredClient, ...]:
    """The clients of the ``CLIENTS`` setting: a JSON list of objects (empty text: no client).

    Raises:
        ValueError: not JSON, not a list of objects, or an entry is invalid; one line saying which.
    """
    if not text.strip():
        return ()
    try:
        entries: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"should be a JSON list of clients: {exc.msg} at character {exc.pos}") from None
    if not isinstance(entries, list):
        raise ValueError('should be a JSON list of clients, such as [{"id": "acme"}]')
    clients = []
    for index, entry in enumerate(entries):
        try:
            clients.append(RegisteredClient.model_validate(entry))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            if first["type"] == "string_pattern_mismatch":
                message = "should be 1-32 lowercase letters, digits and single inner hyphens"
            raise ValueError(f"entry {index}{f' ({where})' if where else ''}: {message}") from None
    return tuple(clients)
