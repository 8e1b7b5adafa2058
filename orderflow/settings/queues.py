"""The queues and clients sections: how orderflow names its own queues, and the client registry with
its admission ceilings (which client queues are consumed, how many orders each may have in flight)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator

from orderflow.clients import ClientRegistry, RegisteredClient, parse_clients
from orderflow.queues.base import DEAD_LETTER_SUFFIX
from orderflow.settings.base import Section


class Queues(Section):
    """Queues: the names of orderflow's own queues (agent requests and responses) and this host's id.
    Read by the agents, the workflow's senders and the response listeners."""

    AGENT_QUEUE_PREFIX: str = Field(
        "agent-", description="Request queue of agent NAME is PREFIX+NAME (agent-inventory ...)."
    )
    AGENT_RESPONSES_QUEUE: str = Field(
        "agent-responses",
        description="Response queue. Locally each devhost process appends its host id, because an "
        "orchestration lives only in the process that claimed it (docs/design.md §1).",
    )
    HOST_ID: str = Field("local", description="This process's host id (lowercase letters, digits, '-').")
    AGENT_RESPONSES_PER_HOST: bool = Field(
        True,
        description="Whether this process consumes a response queue of its own, AGENT_RESPONSES_QUEUE-"
        "<HOST_ID> (a devhost process: its orchestrations live in it alone), rather than the shared "
        "AGENT_RESPONSES_QUEUE. The Functions host always takes false: its task hub is shared and its "
        "response trigger listens on AGENT_RESPONSES_QUEUE (function_host.wiring.load_settings).",
    )

    def agent_queue(self, agent: str) -> str:
        """Request queue name of an agent."""
        return f"{self.AGENT_QUEUE_PREFIX}{agent}"

    def is_response_queue(self, name: str) -> bool:
        """Whether ``name`` is one of this deployment's agent response queues: ``AGENT_RESPONSES_QUEUE``,
        or a host's ``AGENT_RESPONSES_QUEUE-<host id>`` (a host id of lowercase letters, digits and
        hyphens), never a dead-letter queue."""
        if name == self.AGENT_RESPONSES_QUEUE:
            return True
        host = name.removeprefix(f"{self.AGENT_RESPONSES_QUEUE}-")
        return (
            host != name
            and not name.endswith(DEAD_LETTER_SUFFIX)
            and re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", host) is not None
        )

    def response_queue(self) -> str:
        """Response queue of this host: ``AGENT_RESPONSES_QUEUE-<HOST_ID>`` for a devhost process
        (``AGENT_RESPONSES_PER_HOST`` and a host id), else the shared ``AGENT_RESPONSES_QUEUE``."""
        if self.AGENT_RESPONSES_PER_HOST and self.HOST_ID:
            return f"{self.AGENT_RESPONSES_QUEUE}-{self.HOST_ID}"
        return self.AGENT_RESPONSES_QUEUE

    def reserved_queue(self, name: str) -> str | None:
        """What ``name`` is among orderflow's own queues, or None when it may be a client's queue.

        See :func:`reserved_queue_name`; returns e.g. ``"a dead-letter queue"``.
        """
        return reserved_queue_name(
            name,
            AGENT_QUEUE_PREFIX=self.AGENT_QUEUE_PREFIX,
            AGENT_RESPONSES_QUEUE=self.AGENT_RESPONSES_QUEUE,
        )


class Clients(Section):
    """Clients: the client registry (``CLIENTS``) and the admission ceilings over it. Read by intake
    (admission, replies), the starter and the operator API's queue views.

    Built with the validation context ``{"queues": Queues}`` (what :meth:`orderflow.settings.Settings.load`
    passes), a client queue is checked against that section's queue names; without it, against the
    default names.
    """

    CLIENTS: str = Field(
        "",
        description="The client registry, a JSON list: one object per client, "
        '{"id": "acme", "inboundQueue": "orders-acme", "replyQueue": "replies-acme", "maxInFlight": 500, '
        '"principalId": "<Entra object id>"}; only id is required (a slug of lowercase letters, digits and '
        "hyphens, at most 32); the queues default to orders-<id> and replies-<id>; maxInFlight (default: "
        "none) is the client's own ceiling on orders in flight, beside MAX_IN_FLIGHT_ORDERS. A client is "
        "identified by the inbound queue its message arrives on and answered on its reply queue only "
        "(docs/clients.md). Ids and queues must be unique, and none of orderflow's own queues. Empty "
        "(default): no client, nothing is consumed.",
    )
    MAX_IN_FLIGHT_ORDERS: int = Field(
        10_000,
        ge=0,
        description="Ceiling on orders in flight (Pending + Processing) across the system; above it new "
        "submissions are answered Rejected with a retry-after. 0 disables the check. 10,000 is minutes "
        "of work at the tens to low hundreds of orders/s a scheduler process moves (docs/design.md §8): "
        "more in flight adds no throughput, only time spent Pending and records for every supervisor "
        "sweep, while the in-flight COUNT stays a cheap aggregate. Processes admit against a cached count, "
        "so the ceiling can be overshot by what the other processes admit in one ADMISSION_REFRESH_S.",
    )
    MAX_SUBMISSION_BACKLOG: int = Field(
        5_000,
        ge=0,
        description="Ceiling on messages waiting in each client's inbound queue (orders-<id>), per client; "
        "while a client's queue holds more, its new orders are answered Rejected (cheaply, so the excess "
        "drains fast). 0 disables the check. 5,000 is about a minute of submissions for one consumer "
        "process (each costs two creates and a reply): an order further back would wait longer than its "
        "client should be left without an answer.",
    )
    ADMISSION_REFRESH_S: float = Field(
        5.0,
        ge=0,
        description="Seconds between reads of the in-flight count and the queue backlog by one process "
        "(one COUNT query and one queue-properties call per period, not per message); also the base of a "
        "rejection's retry-after. The starter's cadence, so claims are seen about as fast as they happen.",
    )
    _clients: ClientRegistry = PrivateAttr(default_factory=lambda: ClientRegistry(()))
    _queues: Queues = PrivateAttr(default_factory=Queues)

    @field_validator("CLIENTS")
    @classmethod
    def _clients_are_valid(cls, text: str, info: ValidationInfo) -> str:
        queues = _queues_of(info.context, info.data)
        ClientRegistry(parse_clients(text), reserved=queues.reserved_queue)
        return text

    def model_post_init(self, context: Any, /) -> None:
        """Build the client registry once (the ``CLIENTS`` text was checked by its validator), and refuse
        quotas that would let the clients together exceed ``MAX_IN_FLIGHT_ORDERS``.

        Raises:
            ValueError: the registry's ``maxInFlight`` values add up to more than the global ceiling, or
                leave less than one order each to the clients without one.
        """
        self._queues = _queues_of(context, {})
        self._clients = ClientRegistry(parse_clients(self.CLIENTS), reserved=self._queues.reserved_queue)
        ceiling, registry = self.MAX_IN_FLIGHT_ORDERS, self._clients
        unset = sum(1 for c in registry if c.max_in_flight is None)
        if ceiling > 0 and len(registry) and _fair_share(ceiling, registry, unset) < (1 if unset else 0):
            total = sum(c.max_in_flight or 0 for c in registry)
            short = f"leave less than one order each for the {unset} without one" if unset else "exceed it"
            raise ValueError(
                f"CLIENTS: the clients' maxInFlight values add up to {total}, which under "
                f"MAX_IN_FLIGHT_ORDERS ({ceiling}) {short}: lower them or raise the ceiling, so that no "
                "client can fill the system for the others"
            )

    def client_quota(self, client: RegisteredClient) -> int:
        """The most orders ``client`` may have in flight: its ``maxInFlight``, else an equal share of what
        the registry's ``maxInFlight`` values leave of ``MAX_IN_FLIGHT_ORDERS`` (0: no quota, only
        when the global ceiling is off too).

        The settings refuse a registry whose quotas would exceed the global ceiling, so the quotas add
        up to at most ``MAX_IN_FLIGHT_ORDERS``: no client can fill the system for the others.
        """
        if client.max_in_flight is not None:
            return client.max_in_flight
        registry = self.clients()
        unset = sum(1 for c in registry if c.max_in_flight is None)
        return _fair_share(self.MAX_IN_FLIGHT_ORDERS, registry, unset)

    def is_deployment_queue(self, name: str) -> bool:
        """Whether ``name`` is one of the deployment's queues: one of orderflow's own
        (:meth:`Queues.reserved_queue`), a registered client's inbound or reply queue, or the dead-letter
        queue (``<queue>-deadletter``) of one of these that is not itself a dead-letter queue. Only these
        are ever created locally; a reply queue an earlier record names, ``x-deadletter-deadletter``, or
        any other, is not. The operator API's dead-letter routes take fewer: only the queues orderflow
        consumes (``operator_api.deadletters.deployment_queues``)."""
        if name.endswith(DEAD_LETTER_SUFFIX):
            source = name.removesuffix(DEAD_LETTER_SUFFIX)
            return not source.endswith(DEAD_LETTER_SUFFIX) and self.is_deployment_queue(source)
        registry = self.clients()
        return (
            self._queues.reserved_queue(name) is not None
            or registry.for_inbound_queue(name) is not None
            or registry.is_reply_queue(name)
        )

    def clients(self) -> ClientRegistry:
        """The client registry of ``CLIENTS``."""
        return self._clients

    def client(self, client_id: str) -> RegisteredClient:
        """The registered client ``client_id``.

        Raises:
            KeyError: no such client in ``CLIENTS``.
        """
        return self._clients.get(client_id)


def _queues_of(context: Any, data: dict[str, Any]) -> Queues:
    """The queues section client queues are checked against: the context's, else one of the queue
    settings validated beside ``CLIENTS`` (the flat loader's), else the defaults."""
    queues = context.get("queues") if isinstance(context, dict) else None
    if isinstance(queues, Queues):
        return queues
    return Queues.model_construct(**{name: data[name] for name in _QUEUE_SETTINGS if name in data})


def _fair_share(ceiling: int, registry: ClientRegistry, unset: int) -> int:
    """What the explicit quotas leave of ``ceiling``, split among the ``unset`` clients without one
    (all of it when every client has one; 0 when the ceiling is off)."""
    if ceiling <= 0:
        return 0
    left = ceiling - sum(c.max_in_flight or 0 for c in registry)
    return left // unset if unset else left


_QUEUE_SETTINGS = ("AGENT_QUEUE_PREFIX", "AGENT_RESPONSES_QUEUE")
"""The settings that name orderflow's own queues (:func:`reserved_queue_name`)."""


def reserved_queue_name(
    name: str,
    *,
    AGENT_QUEUE_PREFIX: str = "agent-",  # noqa: N803 (the settings' own names)
    AGENT_RESPONSES_QUEUE: str = "agent-responses",  # noqa: N803
) -> str | None:
    """What ``name`` is among orderflow's own queues, or None when it may be a client's queue.

    Reserved, from the same settings the hosts name their queues by: the response queue and every
    host's (``AGENT_RESPONSES_QUEUE`` and ``AGENT_RESPONSES_QUEUE-<hostid>``), every name starting with
    ``AGENT_QUEUE_PREFIX`` (agent request queues, present and future) and every local dead-letter queue
    (``<queue>-deadletter``). A status reply sent to one of them would be taken for a request, or read by
    nobody.

    Returns:
        A short description such as ``"a dead-letter queue"``, or None.
    """
    if name == AGENT_RESPONSES_QUEUE or name.startswith(f"{AGENT_RESPONSES_QUEUE}-"):
        return "an agent response queue (AGENT_RESPONSES_QUEUE)"
    if name.endswith(DEAD_LETTER_SUFFIX):
        return "a dead-letter queue"
    if AGENT_QUEUE_PREFIX and name.startswith(AGENT_QUEUE_PREFIX):
        return f"an agent request queue (AGENT_QUEUE_PREFIX {AGENT_QUEUE_PREFIX!r})"
    return None
