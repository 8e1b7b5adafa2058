"""``python -m devhost``: run one local host process until SIGINT or SIGTERM.

Settings come from the environment (see :class:`orderflow.settings.Settings`); ``--roles`` picks the
roles, ``--host-id`` names the process (its response queue is ``agent-responses-<host-id>``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import warnings
from types import FrameType
from typing import Annotated

import typer

from devhost.delivery_faults import with_delivery_faults
from devhost.host import ALL_ROLES, Dependencies, DevHost
from orderflow.settings import Settings
from orderflow.telemetry import configure_telemetry
from orderflow.wiring import connect_queues, connect_stores
from supervisor.lease import LeaderLease, NoLease, SupervisorLease

cli = typer.Typer(add_completion=False)


class _CancelledTimerNoise(logging.Filter):
    """Drops durabletask's warning for a timer that fires after the orchestration cancelled it.

    Every step whose agent answers before the deadline cancels its timer (docs/design.md §7); the
    backend still delivers the timer, and the SDK ignores it with a warning per step.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "Ignoring unexpected timerFired" not in record.getMessage()


def configure_logging(level: str) -> None:
    """Console logging for a devhost process; the SDKs' per-request chatter is kept at WARNING."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
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


@cli.command()
def run(
    roles: Annotated[
        str, typer.Option(help=f"Comma-separated roles, or 'all': {','.join(ALL_ROLES)}")
    ] = "all",
    host_id: Annotated[str | None, typer.Option(help="Host id (overrides HOST_ID).")] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
) -> None:
    """Run the chosen roles until SIGINT or SIGTERM."""
    configure_logging(log_level)
    configure_telemetry("orderflow-devhost")
    settings = Settings.load(HOST_ID=host_id) if host_id else Settings.load()
    chosen = ALL_ROLES if roles == "all" else tuple(r.strip() for r in roles.split(",") if r.strip())
    stores = connect_stores(settings)
    # Several devhost processes may run the supervisor: one blob lease elects the one that sweeps.
    lease: SupervisorLease = NoLease()
    if "supervisor" in chosen and settings.SUPERVISOR_LEASE_ENABLED:
        lease = LeaderLease.from_connection_string(
            settings.STORAGE_CONNECTION_STRING,
            settings.SUPERVISOR_LEASE_BLOB,
            duration_s=settings.SUPERVISOR_LEASE_S,
            # Named on the lease blob while it leads, so operators and the chaos run can see who does.
            holder={"host": settings.HOST_ID, "pid": str(os.getpid())},
        )
    # Duplicated and late deliveries, only when a chaos run asks for them (DEVHOST_CHAOS).
    queues = with_delivery_faults(connect_queues(settings), settings)
    host = DevHost(
        settings,
        Dependencies(states=stores.state, orders=stores.orders, queues=queues, lease=lease),
        chosen,
    )

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("signal %s: stopping", signum)
        host.stop_event.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    host.start()
    print(f"devhost {settings.HOST_ID} ready", flush=True)
    host.wait()
    host.stop()
    stores.close()


if __name__ == "__main__":
    cli()
