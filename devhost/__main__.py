"""``python -m devhost``: run one local host process until SIGINT, SIGTERM or SIGHUP.

Settings come from the environment (see :class:`orderflow.settings.Settings`, and
:class:`devhost.settings.LocalSettings` for the local host's own); ``--roles`` picks the
roles, ``--host-id`` names the process (its response queue is ``agent-responses-<host-id>``),
``--api-port`` the loopback port of the operator API (the ``api`` role; with the ``OPERATOR_*`` settings
of the local issuer it also serves that issuer's JWKS).

Exit status: 0 once a signal has stopped it; 2, with one line on stderr, for bad arguments or settings
(found before anything starts, or while connecting: a malformed connection string); 1, with one line,
when start-up fails otherwise (e.g. Cosmos DB unreachable, or another live process holding the host id
against the same storage account: the line names its pid, :mod:`devhost.host_lock`). A failed start-up
stops whatever it had started, so the process always exits.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from devhost.cli import SERVER_STOP_SIGNALS, StopSignal, fail, one_line, stop_signals_interrupt
from devhost.host import DevHost
from devhost.host_lock import HostIdInUse, HostIdLock, acquire_host_id
from devhost.lease.blob import LeaderLease
from devhost.lease.election import NoLease, SupervisorLease
from devhost.local_issuer import LOCAL_ISSUER, LocalIssuer
from devhost.queues.factory import StorageQueueFactory, queue_service_url
from devhost.roles import ALL_ROLES, parse_roles
from devhost.settings import LocalSettings, load_settings
from devhost.wiring import connect_queues, connect_stores
from orderflow.breaker import circuit_breakers
from orderflow.clock import Clock, OffsetClock, SteadyClock, SystemClock
from orderflow.dependencies import Dependencies
from orderflow.heap import settle_heap
from orderflow.queues.base import DEAD_LETTER_SUFFIX, QueueFactory
from orderflow.queues.wire import validate_queue_name
from orderflow.settings import Settings
from orderflow.store_clock import store_timed
from orderflow.stores.cosmos import CosmosStores
from orderflow.telemetry import configure_telemetry

cli = typer.Typer(add_completion=False)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""``--log-level`` values (any case)."""

CONNECTION_SETTINGS = ("STORAGE_CONNECTION_STRING", "COSMOS_ENDPOINT", "COSMOS_KEY")
"""Settings a devhost process cannot start without (the local emulators' connections)."""

CLOCK_OFFSET_ENV = "DEVHOST_CLOCK_OFFSET_S"
"""Environment variable of a local host only (not a setting: no deployment reads it): seconds its clock
runs ahead of the machine's (negative: behind), so that ``make chaos`` can run a host with a skewed clock.
Unset or empty: the machine's clock."""


QueueWrapper = Callable[[QueueFactory, Settings], QueueFactory]
"""Wraps a process's queues before any role sees them. The command takes one as its ``obj``
(``cli(obj=wrapper)``): a driver that injects faults at the transport seam runs this command from an
entry point of its own (``python -m demo.chaos.faulty_host``); ``python -m devhost`` wraps nothing."""


LOCK_DIR_ENV = "DEVHOST_LOCK_DIR"
"""Environment variable of a local host only (not a setting): the directory of the host id locks
(:mod:`devhost.host_lock`). Unset or empty: the machine's temporary directory, which every process that
could share a storage account with this one sees."""


def host_clock(env: Mapping[str, str] | None = None) -> Clock:
    """The process's clock: the machine's, moved by :data:`CLOCK_OFFSET_ENV` when it is set.

    Args:
        env: The environment (default ``os.environ``).

    Raises:
        ValueError: the variable is set but is not a finite number of seconds.
    """
    text = (os.environ if env is None else env).get(CLOCK_OFFSET_ENV, "").strip()
    if not text:
        return SystemClock()
    try:
        offset_s = float(text)
    except ValueError:
        offset_s = math.nan
    if not math.isfinite(offset_s):
        raise ValueError(f"{CLOCK_OFFSET_ENV}={text!r} is not valid: it should be a number of seconds")
    logging.getLogger(__name__).warning("this host's clock runs %+.3f s off the machine's", offset_s)
    return OffsetClock(SystemClock(), offset_s)


class _CancelledTimerNoise(logging.Filter):
    """Drops durabletask's warning for a timer that fires after the orchestration cancelled it.

    Every step whose agent answers before the deadline cancels its timer (docs/design.md §7); the
    backend still delivers the timer, and the SDK ignores it with a warning per step.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "Ignoring unexpected timerFired" not in record.getMessage()


def configure_logging(level: str) -> None:
    """Console logging for a devhost process; the SDKs' per-request chatter is kept at WARNING.

    Args:
        level: One of :data:`LOG_LEVELS` (any case).

    Raises:
        ValueError: ``level`` is not one of them.
    """
    if level.upper() not in LOG_LEVELS:
        raise ValueError(f"unknown log level {level!r}; choose from {', '.join(LOG_LEVELS)}")
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
        stream=sys.stderr,
    )
    for noisy in (
        "azure",
        "durabletask",
        "durabletask-worker",
        "durabletask-client",
        "httpx",
        "urllib3",
        "grpc",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    for handler in logging.getLogger().handlers:
        handler.addFilter(_CancelledTimerNoise())
    # The local emulator's certificate is self-signed: verification is off only when
    # COSMOS_VERIFY_TLS is false.
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")


def check_host_id(settings: Settings) -> None:
    """Refuse a host id the process cannot run under: empty (every host would share one response
    queue), or one that makes its response queue (``agent-responses-<host-id>``) an invalid queue name.

    Raises:
        ValueError: with a one-line message naming ``--host-id`` / ``HOST_ID``.
    """
    host_id = settings.queues.HOST_ID
    if not host_id:
        raise ValueError("the host id (--host-id or HOST_ID) is empty; give one such as h1")
    try:
        validate_queue_name(settings.queues.response_queue())
    except ValueError:
        # Storage queue names are at most 63 characters, the dead-letter queue's included.
        longest = 63 - len(f"{settings.queues.AGENT_RESPONSES_QUEUE}-{DEAD_LETTER_SUFFIX}")
        raise ValueError(
            f"invalid host id {host_id!r} (--host-id or HOST_ID): use lowercase letters, digits and single "
            f"inner hyphens, at most {longest} characters (it names this process's response queue "
            f"{settings.queues.response_queue()!r})"
        ) from None


def connect_transport(
    settings: Settings,
    roles: Sequence[str],
    wrap_queues: QueueWrapper | None = None,
    *,
    local: LocalSettings,
) -> tuple[QueueFactory, StorageQueueFactory, SupervisorLease]:
    """The queues (wrapped by ``wrap_queues`` when given), the same queues unwrapped (whose
    ``<queue>-deadletter`` queues the operator API reads) and the supervisor lease ``local`` names.

    Both parse ``STORAGE_CONNECTION_STRING`` locally, with no network call, so a malformed one is
    reported before anything waits on a service.

    Raises:
        ValueError: ``STORAGE_CONNECTION_STRING`` is empty or malformed.
    """
    try:
        storage_queues = connect_queues(settings.connections, settings.clients)
        # Several devhost processes may run the supervisor: one blob lease elects the one that sweeps.
        lease: SupervisorLease = NoLease()
        if "supervisor" in roles and local.SUPERVISOR_LEASE_ENABLED:
            lease = LeaderLease.from_connection_string(
                settings.connections.STORAGE_CONNECTION_STRING,
                local.SUPERVISOR_LEASE_BLOB,
                duration_s=local.SUPERVISOR_LEASE_S,
                # Named on the lease blob while it leads, so operators and the chaos run can see who does.
                holder={"host": settings.queues.HOST_ID, "pid": str(os.getpid())},
            )
    except ValueError as exc:  # the SDK's message does not say which setting it read
        raise ValueError(f"STORAGE_CONNECTION_STRING: {exc}") from exc
    queues = storage_queues if wrap_queues is None else wrap_queues(storage_queues, settings)
    return queues, storage_queues, lease


@cli.command()
def run(
    ctx: typer.Context,
    roles: Annotated[
        str, typer.Option(help=f"Comma-separated roles, or 'all': {','.join(ALL_ROLES)}")
    ] = "all",
    host_id: Annotated[
        str | None,
        typer.Option(help="Host id (overrides HOST_ID): lowercase letters, digits and inner hyphens."),
    ] = None,
    log_level: Annotated[str, typer.Option(help=f"Logging level: {', '.join(LOG_LEVELS)}.")] = "INFO",
    api_port: Annotated[
        int,
        typer.Option(min=0, max=65535, help="Loopback port of the operator API (api role); 0: a free one."),
    ] = 0,
) -> None:
    """Run the chosen roles until SIGINT, SIGTERM or SIGHUP."""
    # Every argument and setting is checked before anything is connected or started.
    if log_level.upper() not in LOG_LEVELS:
        fail(f"--log-level {log_level!r}: choose from {', '.join(LOG_LEVELS)}", code=2)
    try:
        chosen = parse_roles(roles)
    except ValueError as exc:
        fail(f"--roles {roles!r}: {exc}", code=2)
    if host_id is not None and not host_id:
        fail("--host-id is empty; give one such as h1 (or leave it out to use HOST_ID)", code=2)
    try:
        settings, local = load_settings(HOST_ID=host_id) if host_id is not None else load_settings()
        check_host_id(settings)
    except ValidationError as exc:
        fail(f"invalid settings: {one_line(exc)}", code=2)
    except ValueError as exc:
        fail(str(exc), code=2)
    missing = [name for name in CONNECTION_SETTINGS if not getattr(settings.connections, name)]
    if missing:
        fail(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: export the settings "
            "`python -m devhost.emulators` prints",
            code=2,
        )
    configure_logging(log_level)
    configure_telemetry("orderflow-devhost")
    serve(settings, chosen, local=local, api_port=api_port, wrap_queues=ctx.obj)


def hold_host_id(settings: Settings, env: Mapping[str, str] | None = None) -> HostIdLock:
    """Take ``HOST_ID`` for this process against the queue service of ``STORAGE_CONNECTION_STRING``,
    before anything consumes its response queue or binds its wake-up socket (:mod:`devhost.host_lock`).

    Args:
        settings: ``HOST_ID`` and ``STORAGE_CONNECTION_STRING``.
        env: The environment (default ``os.environ``), for :data:`LOCK_DIR_ENV`.

    Raises:
        HostIdInUse: another live process holds it; the message names its pid.
        ValueError: ``STORAGE_CONNECTION_STRING`` is malformed.
    """
    directory = (os.environ if env is None else env).get(LOCK_DIR_ENV, "").strip()
    try:
        endpoint = queue_service_url(settings.connections.STORAGE_CONNECTION_STRING)
    except ValueError as exc:  # the SDK's message does not say which setting it read
        raise ValueError(f"STORAGE_CONNECTION_STRING: {exc}") from exc
    return acquire_host_id(
        settings.queues.HOST_ID, endpoint, directory=Path(directory) if directory else None
    )


def local_issuer_of(settings: Settings) -> LocalIssuer | None:
    """The local token issuer, when the operator API's settings trust it (``OPERATOR_ISSUER`` is its)."""
    return LocalIssuer.from_key_file() if settings.operator_api.operator_issuer() == LOCAL_ISSUER else None


def _dependencies(
    settings: Settings, stores: CosmosStores, queues: QueueFactory, dead_letters: StorageQueueFactory
) -> Dependencies:
    """The process's one dependency container: every role it runs is wired with it."""
    # Every role runs on the state store's time, measured through this host's clock as it read at start
    # and has advanced since: a wall-clock step cannot shift a deadline.
    probe = partial(stores.breakers.clock_probe, settings.queues.HOST_ID)
    states, clock = store_timed(
        stores.state, SteadyClock(host_clock()), settings.alerts, settings.queues.HOST_ID, probe=probe
    )
    return Dependencies(
        states=states,
        orders=stores.orders,
        queues=queues,
        clock=clock,
        breakers=circuit_breakers(stores.breakers, clock, settings.breakers, settings.queues.HOST_ID),
        dead_letters=dead_letters,
        alerts=stores.alerts,  # the host keeps its alerts and sweep status there
    )


def serve(
    settings: Settings,
    roles: Sequence[str],
    *,
    local: LocalSettings,
    api_port: int = 0,
    wrap_queues: QueueWrapper | None = None,
) -> None:
    """Connect, start the roles, print ``devhost <id> ready``, and run until SIGINT, SIGTERM or SIGHUP.

    ``wrap_queues``, when given, wraps the process's queues (:data:`QueueWrapper`).

    A signal during start-up interrupts it. Whatever happens, what was started is stopped and the
    stores are closed before this returns or exits.

    Raises:
        typer.Exit: 2 after a one-line error for a missing or malformed connection setting (or any other
            ``ValueError`` of start-up, such as an invalid queue name); 1 for any other start-up failure,
            such as another live process holding the host id (the line names its pid).
    """
    log = logging.getLogger(__name__)
    stores: CosmosStores | None = None
    host: DevHost | None = None
    held: HostIdLock | None = None
    try:
        with stop_signals_interrupt(SERVER_STOP_SIGNALS) as signals:
            try:
                queues, dead_letters, lease = connect_transport(settings, roles, wrap_queues, local=local)
                held = hold_host_id(settings)
                stores = connect_stores(settings.connections)
                deps = _dependencies(settings, stores, queues, dead_letters)
                issuer = local_issuer_of(settings) if "api" in roles else None
                host = DevHost(
                    deps,
                    roles,
                    settings=settings,
                    local=local,
                    lease=lease,
                    api_port=api_port,
                    local_issuer=issuer,
                )
                host.start()  # stops what it started if it fails
                settle_heap()
                # "ready" is the first line: whoever started the process waits for it.
                print(f"devhost {settings.queues.HOST_ID} ready", flush=True)
                if host.api_url is not None:
                    print(f"devhost {settings.queues.HOST_ID} operator API on {host.api_url}", flush=True)
                signals.wait(host.stop_event)
            except KeyboardInterrupt as exc:
                signum = exc.signum if isinstance(exc, StopSignal) else signal.SIGINT
                log.info("%s: stopping", signal.Signals(signum).name)
            finally:
                signals.ignore_more()  # a second signal must not cut the clean-up short
                if host is not None:
                    host.stop()
                if stores is not None:
                    stores.close()
                if held is not None:
                    held.release()
    except HostIdInUse as exc:
        fail(f"devhost {settings.queues.HOST_ID} did not start: {exc}", code=1)
    except ValueError as exc:
        log.debug("devhost %s did not start", settings.queues.HOST_ID, exc_info=True)
        fail(f"devhost {settings.queues.HOST_ID} did not start: {one_line(exc)}", code=2)
    except Exception as exc:
        # The traceback is in the log at DEBUG (--log-level DEBUG); the operator gets one line.
        log.debug("devhost %s failed", settings.queues.HOST_ID, exc_info=True)
        fail(f"devhost {settings.queues.HOST_ID} failed: {one_line(exc)}", code=1)


if __name__ == "__main__":
    cli()
