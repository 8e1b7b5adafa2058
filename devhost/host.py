"""The local host: runs orderflow's roles in one process over Azurite, cosmosdb-server and durabletask.

Each devhost process runs its own durabletask in-memory backend (a gRPC server on a free loopback port,
in a child process that ends with it: :mod:`devhost.durabletask_backend`) and worker, so an
orchestration lives only in the process that claimed it. Agents answer on the
response queue named in each request, which is this host's own (``agent-responses-<hostid>``). A
process that dies takes its orchestrations with it; the supervisor (here or in another process)
recovers them from the state store, exactly as it would for a crashed Functions worker.

Wiring happens here and nowhere else: the roles are plain functions that take their dependencies.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from durabletask import client as dt_client
from durabletask import worker as dt_worker
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential_jitter

from activities.sections import ActivitySections
from agents.services import HttpRemoteService
from devhost.capacity import InFlight, running_orchestrations
from devhost.durabletask_adapter import (
    DURABLETASK_WORKER_LOGGER,
    DurableTaskClient,
    quiet_local_cancel,
    register_order_workflow,
)
from devhost.durabletask_backend import LOOPBACK, BackendProcess, LoopbackBackend, free_port, serve_backend
from devhost.handlers import STARTER_WAKEUP, agent_handler, submission_handler
from devhost.lease.election import NoLease, SupervisorLease
from devhost.local_issuer import LocalIssuer
from devhost.loops import ConsumerLoop, PeriodicLoop, Wakeups, WakingQueueFactory
from devhost.operator_http import local_operator_app
from devhost.roles import ALL_ROLES, check_roles
from devhost.service_credential import agent_services
from devhost.serving import serve_in_thread, server_url
from devhost.serving import stop as stop_server
from devhost.settings import LocalSettings
from devhost.wakeup_channel import WakeupChannel
from intake.client_admission import ClientAdmission
from orchestrators.listener import handle_response
from orchestrators.starter import run_starter_pass
from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.attempts import AttemptStarts, first_requests_for
from orderflow.bindings import TokenSource
from orderflow.dependencies import Dependencies
from orderflow.errors import TransientError
from orderflow.queues.base import MessageQueue, ReceivedMessage
from orderflow.replies import resend_pending_replies
from orderflow.settings import Settings
from orderflow.stores.paging import PageLimits
from supervisor.retention import RetentionReport, dead_letter_sources, run_retention_pass
from supervisor.status import record_sweep, sweep_doc
from supervisor.sweep import SweepCursor, run_sweep

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger(__name__)

RETENTION_INTERVAL_S = 60.0
"""Seconds between retention passes: the leader's over the stores and the shared queues' dead letters,
and each orchestrating process's over its own backend's history and its own response queue."""

START_RETRY_S = 60.0
"""Seconds a starting process keeps trying to open its queues while the queue service fails transiently
(an emulator busy or restarting), as the Functions host keeps retrying a trigger's listener, before the
start-up fails."""

SUBMISSION_HANDLERS = 4
"""Submission handler threads of one process, shared out among the registered clients' queues (at least
one per client)."""


class DevHost:
    """One local host process running a subset of the roles.

    Args:
        deps: The dependency container every role of this process is wired with: stores, queues, clock
            and the process's caches. The host wraps its queues so that a send wakes this
            process's own consumers; :attr:`deps` is the container the roles get.
        roles: Roles to run (see :data:`ALL_ROLES`).
        settings: orderflow's settings, whose sections the host hands each role.
        local: The local host's own settings (worker threads, durabletask backend, wake-up directory);
            None: their defaults.
        lease: Elects the one supervisor that sweeps among several processes; None: always leader
            (:class:`~devhost.lease.election.NoLease`). Only the devhost's supervisor loop uses it.
        api_port: Loopback port of the operator API (the ``api`` role); 0 picks a free one
            (:attr:`api_url` says which).
        local_issuer: The local token issuer whose JWKS the operator API also serves, or None.
        service_credential: Where the agents' tokens for their ``entra`` service bindings come from;
            None: the local issuer's key file (:class:`~devhost.service_credential.LocalAgentCredential`).
    """

    def __init__(
        self,
        deps: Dependencies,
        roles: Iterable[str] = ALL_ROLES,
        *,
        settings: Settings,
        local: LocalSettings | None = None,
        lease: SupervisorLease | None = None,
        api_port: int = 0,
        local_issuer: LocalIssuer | None = None,
        service_credential: TokenSource | None = None,
    ) -> None:
        # A client's text in a log record stays one printable line, whoever built this host (python -m
        # devhost configures telemetry, which does the same; an embedding or a test may not).
        telemetry.guard_log_records()
        self.settings = settings
        self.local = local if local is not None else LocalSettings.load({})
        self.api_port = api_port
        self.local_issuer = local_issuer
        self.service_credential = service_credential
        self.api_url: str | None = None
        self._api: tuple[uvicorn.Server, threading.Thread] | None = None
        self.roles = check_roles(roles)
        self.lease: SupervisorLease = lease if lease is not None else NoLease()
        self.stop_event = threading.Event()
        # Sends made by this process wake its own consumer loops at once (devhost.loops.Wakeups), and
        # through the shared directory the other devhost processes' loops (WAKEUP_DIR).
        self.wakeups = Wakeups()
        self.channel: WakeupChannel | None = None
        if self.local.WAKEUP_DIR:
            self.channel = WakeupChannel(
                Path(self.local.WAKEUP_DIR), settings.queues.HOST_ID, self.wakeups.wake
            )
            self.wakeups.announce = self.channel.announce
        self.deps = dataclasses.replace(deps, queues=WakingQueueFactory(deps.queues, self.wakeups))
        # The claimant sends the request of the step each claim started (orderflow.attempts).
        self._first_requests = first_requests_for(self.deps, settings.starter)
        self._loops: list[ConsumerLoop | PeriodicLoop] = []
        self._backend: LoopbackBackend | BackendProcess | None = None
        self._worker: dt_worker.TaskHubGrpcWorker | None = None
        self._grpc_client: dt_client.TaskHubGrpcClient | None = None
        self.client: DurableTaskClient | None = None
        # Where the submission starts a new order at once (built once the orchestrator runs here).
        self._starts: AttemptStarts | None = None
        self._in_flight = InFlight(self.running_instances, limit=self.local.MAX_IN_FLIGHT_PER_HOST)
        self._services: list[HttpRemoteService] = []
        self.sweep_cursor = SweepCursor()
        self._was_leader = False
        self._next_sweep_at = 0.0  # time.monotonic() of the next sweep (cadence, not business time)
        self._next_purge_at = 0.0  # time.monotonic() of the next retention pass
        # One for the process, shared by the submission handler threads (built in start()).
        self.admission: ClientAdmission | None = None
        self._stopped = False
        self._previous_sink: telemetry.AlertSinkFn | None = None
        self._sink_installed = False

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start every role's loop (and the durabletask backend and worker if orchestrating).

        Raises:
            Exception: whatever stopped the start-up (e.g. ``ValueError`` for an invalid queue name),
                after :meth:`stop` has stopped what was already started: the durabletask worker's
                thread alone would keep the process alive.
        """
        try:
            self._start_roles()
        except BaseException:
            self.stop()
            raise
        logger.info("devhost %s running roles %s", self.settings.queues.HOST_ID, sorted(self.roles))

    def _start_roles(self) -> None:
        s = self.settings
        # Before anything starts: bindings that cannot serve the workflows refuse the start.
        services = agent_services(s.agents, self.service_credential) if "agents" in self.roles else []
        if self.deps.alerts is not None:
            # The process's alerts are kept from now on; stop() puts the previous sink back.
            sink = AlertSink(
                self.deps.alerts, self.deps.clock, s.queues.HOST_ID, window_s=s.alerts.ALERT_WINDOW_S
            )
            self._previous_sink, self._sink_installed = telemetry.use_alert_sink(sink), True
        if self.channel is not None:
            self.channel.start()
        if "orchestrator" in self.roles:
            self._start_durabletask()
            # This process's backend and response queue are its own: no other process can purge them.
            self._periodic("retention", self.purge_own_history, RETENTION_INTERVAL_S)
        if "submission" in self.roles:
            self._start_submission()
        if "listener" in self.roles:
            self._consume(s.queues.response_queue(), self._on_response, concurrency=16, announced=True)
        if "agents" in self.roles:
            for service in services:
                self._services.append(service)
                self._consume(
                    s.queues.agent_queue(service.name),
                    agent_handler(self.deps, s, service),
                    concurrency=self.local.AGENT_CONCURRENCY,
                    announced=True,
                )
        if "starter" in self.roles:
            self._periodic(
                "starter",
                self._starter_tick,
                self.local.STARTER_INTERVAL_S,
                wakeup=self.wakeups.event(STARTER_WAKEUP),
            )
        if "supervisor" in self.roles:
            # Tick often enough to renew the lease on time even when sweeps are rarer than renewals.
            tick_s = min(self.local.SUPERVISOR_INTERVAL_S, self.lease.renew_every_s)
            self._periodic("supervisor", self._supervisor_tick, tick_s)
        for loop in self._loops:
            loop.start()
        if "api" in self.roles:
            self._start_api()

    def _start_api(self) -> None:
        """Serve the operator API on loopback (ValueError: its settings configure it only in part)."""
        app = local_operator_app(self.deps, self.settings, issuer=self.local_issuer)
        server, thread = serve_in_thread(app, "127.0.0.1", self.api_port)
        self._api = (server, thread)
        self.api_url = server_url(server)
        logger.info("devhost %s operator API on %s", self.settings.queues.HOST_ID, self.api_url)

    def stop(self) -> None:
        """Stop every loop, then the worker and backend. In-flight orchestrations are abandoned (the
        supervisor recovers them), exactly as when a Functions worker is recycled.

        Safe after a start-up that failed half-way. Each part is forgotten once stopped, so a call cut
        short (by a signal) can be made again to stop the rest; once everything is stopped, a call does
        nothing.
        """
        if self._stopped:
            return
        self.stop_event.set()
        self.wakeups.notify_all()
        while self._loops:
            self._loops[0].join()
            self._loops.pop(0)
        if self._api is not None:
            stop_server(*self._api)
            self._api = None
        if "supervisor" in self.roles:
            self._release_lease()
        if self._worker is not None:
            with quiet_local_cancel():
                self._worker.stop()  # type: ignore[no-untyped-call]
            self._worker = None
        if isinstance(self._backend, BackendProcess):
            self._backend.stop()
        elif self._backend is not None:
            self._backend.stop(grace=1.0)
        self._backend = None
        while self._services:
            self._services.pop().close()
        if self.channel is not None:
            self.channel.stop()
            self.channel = None
        if self._sink_installed:
            telemetry.use_alert_sink(self._previous_sink)
            self._sink_installed = False
        self._stopped = True
        logger.info("devhost %s stopped", self.settings.queues.HOST_ID)

    # --- wiring ------------------------------------------------------------------------------
    def _start_durabletask(self) -> None:
        port = free_port()
        if self.local.DURABLETASK_BACKEND == "process":
            backend = BackendProcess(port)
            self._backend = backend  # first: stop() must find a backend whose start was interrupted
            address = backend.start()
        else:
            self._backend = serve_backend(port)
            address = f"{LOOPBACK}:{port}"
        # Named loggers, so the host's logging configuration applies (the SDK's default logger is a
        # private one with its own console handler).
        worker = dt_worker.TaskHubGrpcWorker(
            host_address=address,
            logger=logging.getLogger(DURABLETASK_WORKER_LOGGER),
            concurrency_options=dt_worker.ConcurrencyOptions(
                maximum_thread_pool_workers=self.local.WORKER_THREADS
            ),
        )
        register_order_workflow(
            worker, self.deps, ActivitySections.of(self.settings), self._in_flight.finished
        )
        self._worker = worker  # first: stop() must find a worker whose start was interrupted
        worker.start()  # type: ignore[no-untyped-call]
        self._grpc_client = dt_client.TaskHubGrpcClient(
            host_address=address, logger=logging.getLogger("durabletask.client")
        )
        self.client = DurableTaskClient(self._grpc_client)
        self._starts = AttemptStarts(
            self.client,
            self.settings.queues.response_queue(),
            self.deps.cache.put,
            self.deps.breakers,
            self._first_requests,
        )

    def _start_submission(self) -> None:
        """One consumer per registered client's inbound queue, each handing its messages that client.

        Both queues of every client are created here, at start-up: nothing creates a reply queue because
        a message named it (docs/clients.md).
        """
        clients = list(self.settings.clients.clients())
        if not clients:
            logger.warning(
                "devhost %s: no client is registered (CLIENTS): no queue to consume",
                self.settings.queues.HOST_ID,
            )
            return
        self.admission = ClientAdmission.from_clients(
            self.settings.clients, states=self.deps.states, queues=self.deps.queues
        )
        for client in clients:
            self._open_queue(client.reply_queue)
            self._consume(
                client.inbound_queue,
                submission_handler(
                    self.deps,
                    client,
                    self.settings,
                    admission=self.admission,
                    # Only this process's own activities read the cache.
                    order_cache=self.deps.order_cache if "orchestrator" in self.roles else None,
                    wakeups=self.wakeups,
                    claim_on_submit=self._claim_on_submit,
                ),
                concurrency=max(1, SUBMISSION_HANDLERS // len(clients)),
                announced=self.local.WAKEUP_INBOUND,
            )

    def _open_queue(self, name: str) -> MessageQueue:
        """The queue ``name`` (created if missing), tried again for :data:`START_RETRY_S` while the queue
        service fails transiently; other errors, and the last transient one, are raised."""
        retrying = Retrying(
            retry=retry_if_exception_type(TransientError),
            stop=stop_after_delay(START_RETRY_S),
            wait=wait_exponential_jitter(multiplier=0.2, max=5.0, jitter=0.2),
            before_sleep=lambda state: logger.warning(
                "opening queue %s failed (%s); trying again",
                name,
                state.outcome and state.outcome.exception(),
            ),
            reraise=True,
        )
        return retrying(self.deps.queues.queue, name)

    def _consume(self, queue_name: str, handler: Any, *, concurrency: int, announced: bool = False) -> None:
        """Consume ``queue_name``; ``announced``: every sender to it announces its sends (ConsumerLoop)."""
        s = self.settings
        self._loops.append(
            ConsumerLoop(
                self._open_queue(queue_name),
                handler,
                self.stop_event,
                concurrency=concurrency,
                lock_s=s.consumers.QUEUE_LOCK_S,
                max_lock_renewal_s=self.local.QUEUE_MAX_LOCK_RENEWAL_S,
                poll_s=self.local.POLL_INTERVAL_S,
                max_poll_s=self.local.POLL_MAX_INTERVAL_S,
                max_delivery_count=s.consumers.MAX_DELIVERY_COUNT,
                wakeup=self.wakeups.event(queue_name),
                announced=announced and self.channel is not None,
            )
        )

    def _periodic(
        self, name: str, task: Any, interval_s: float, *, wakeup: threading.Event | None = None
    ) -> None:
        self._loops.append(PeriodicLoop(name, task, self.stop_event, interval_s=interval_s, wakeup=wakeup))

    # --- role entry points (thin: parse, call the role function) -------------------------------
    def _on_response(self, message: ReceivedMessage) -> None:
        assert self.client is not None
        handle_response(message.body, client=self.client)

    def _claim_on_submit(self) -> AbstractContextManager[AttemptStarts | None]:
        return self._in_flight.claiming(self._starts)  # None: no orchestrator here, or no room

    def _starter_tick(self) -> None:
        assert self.client is not None
        run_starter_pass(
            states=self.deps.states,
            client=self.client,
            clock=self.deps.clock,
            starter=self.settings.starter,
            steps=self.settings.steps,
            scans=self.settings.scans,
            queue_names=self.settings.queues,
            response_queue=self.settings.queues.response_queue(),
            capacity=self._in_flight.room(),
            on_claimed=self.deps.cache.put,
            breakers=self.deps.breakers,
            first_requests=self._first_requests,
            room=self._in_flight,  # the submission's claims share it: each record's room taken as claimed
        )

    def _supervisor_tick(self) -> None:
        """Keep the lease (renew, or try to acquire), and sweep only while leader, on the sweep cadence."""
        lease = self.lease
        leader = lease.maintain()
        if leader != self._was_leader:
            logger.info(
                "devhost %s supervisor is %s",
                self.settings.queues.HOST_ID,
                "leader" if leader else "stand-by",
            )
            # A new term starts a new scan: the old cursor's cutoff may be a whole term old.
            self.sweep_cursor.reset()
            self._was_leader = leader
        if not leader or time.monotonic() < self._next_sweep_at:
            return
        self._next_sweep_at = time.monotonic() + self.local.SUPERVISOR_INTERVAL_S
        started = self.deps.clock.now()
        report = run_sweep(
            states=self.deps.states,
            queues=self.deps.queues,
            clock=self.deps.clock,
            supervisor=self.settings.supervisor,
            scans=self.settings.scans,
            host_id=self.settings.queues.HOST_ID,
            cursor=self.sweep_cursor,
            keep_going=self._still_leader,
        )
        status = sweep_doc(
            report,
            started=started,
            ended=self.deps.clock.now(),
            host_id=self.settings.queues.HOST_ID,
            leadership="lease",
        )
        record_sweep(self.deps.alerts, status)
        resend_pending_replies(
            states=self.deps.states,
            queues=self.deps.queues,
            clock=self.deps.clock,
            grace_s=self.settings.supervisor.REPLY_GRACE_S,
            limits=PageLimits.from_scans(self.settings.scans),
        )
        if time.monotonic() >= self._next_purge_at:
            # Retention is about days, not seconds: a pass a minute is plenty.
            self._next_purge_at = time.monotonic() + RETENTION_INTERVAL_S
            self.purge_shared_data()

    def purge_shared_data(self) -> RetentionReport:
        """The leader's retention pass: the stores, and the dead letters of the clients' inbound queues,
        the agents' request queues and the shared response queue (:func:`run_retention_pass`)."""
        return run_retention_pass(
            self.deps,
            supervisor=self.settings.supervisor,
            scans=self.settings.scans,
            dead_letter_queues=dead_letter_sources(self.settings.clients, self.settings.queues),
        )

    def purge_own_history(self) -> RetentionReport:
        """This process's retention pass over what only it can reach: its durabletask backend's history
        of ended instances and its own response queue's dead letters (nothing without the orchestrator
        role)."""
        if self.client is None:
            return RetentionReport()
        return run_retention_pass(
            self.deps,
            supervisor=self.settings.supervisor,
            scans=self.settings.scans,
            stores=False,
            dead_letter_queues=[self.settings.queues.response_queue()],
            histories=self.client,
        )

    def _still_leader(self) -> bool:
        """Asked by a sweep before each record: renews the lease when due; False once it is lost."""
        return self.lease.is_leader and self.lease.maintain()

    def _release_lease(self) -> None:
        """Hand the supervisor lease over at once (a stand-by need not wait for it to expire)."""
        try:
            self.lease.release()
        except TransientError:
            logger.warning(
                "devhost %s could not release the supervisor lease; it expires", self.settings.queues.HOST_ID
            )

    @property
    def backend_client(self) -> dt_client.TaskHubGrpcClient | None:
        """The gRPC client of this process's durabletask backend (None without the orchestrator role),
        to inspect what the backend holds: its instances and their history."""
        return self._grpc_client

    def running_instances(self) -> int:
        """Orchestrations of this host not yet finished (one backend query)."""
        return 0 if self._grpc_client is None else running_orchestrations(self._grpc_client)
