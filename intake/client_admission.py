"""Per-client admission: each client's ceilings (built on its first order) and the global ceiling
asked together, what the hosts use (:mod:`intake.admission` for the ceilings and their guarantees)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from intake.admission import AdmissionControl, AdmissionDecision
from orderflow.clients import RegisteredClient
from orderflow.queues.base import QueueFactory
from orderflow.settings import Clients
from orderflow.stores.base import StateStore


class ClientAdmission:
    """Per-client quotas and the global ceiling together (:mod:`intake.admission`): what the hosts use.

    One instance per process, shared by every submission handler thread; a client's
    :class:`AdmissionControl` is built on its first order.

    Args:
        global_ceiling: The system-wide ceiling.
        for_client: Builds the ceilings of one client.
    """

    def __init__(
        self, global_ceiling: AdmissionControl, for_client: Callable[[RegisteredClient], AdmissionControl]
    ) -> None:
        self.global_ceiling = global_ceiling
        self._for_client = for_client
        self._clients: dict[str, AdmissionControl] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_clients(
        cls,
        clients: Clients,
        *,
        states: StateStore,
        queues: QueueFactory,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> ClientAdmission:
        """Admission by ``MAX_IN_FLIGHT_ORDERS``, each client's ``maxInFlight`` and ``MAX_SUBMISSION_BACKLOG``
        of its inbound queue (:meth:`AdmissionControl.from_clients`)."""
        return cls(
            AdmissionControl.from_clients(clients, states=states, queues=queues, monotonic=monotonic),
            lambda client: AdmissionControl.from_clients(
                clients, states=states, queues=queues, monotonic=monotonic, client=client
            ),
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(global_ceiling={self.global_ceiling!r}, clients={sorted(self._clients)})"
        )

    def client_ceiling(self, client: RegisteredClient) -> AdmissionControl:
        """The ceilings of ``client``, built on first use."""
        with self._lock:
            ceiling = self._clients.get(client.client_id)
            if ceiling is None:
                ceiling = self._clients[client.client_id] = self._for_client(client)
            return ceiling

    def admit(self, order_id: str, client: RegisteredClient) -> AdmissionDecision:
        """Decide whether ``client``'s new order ``order_id`` may be written: its own quota first, then the
        global ceiling; an admitted order is counted by both. Never raises for an unreadable count."""
        own = self.client_ceiling(client)
        decision = own.admit(order_id)
        if not decision.admitted:
            return decision
        decision = self.global_ceiling.admit(order_id)
        if not decision.admitted:
            own.give_back()
        return decision

    def release(self, client: RegisteredClient) -> None:
        """Give back the place ``client``'s admitted order took in both ceilings: it was not new."""
        self.client_ceiling(client).give_back()
        self.global_ceiling.give_back()
