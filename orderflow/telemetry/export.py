"""Export of orderflow's telemetry: the Azure Monitor distro configured once per process when an
Application Insights connection string is set (else the local trace export), and log records kept to
one line of printable text."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Final

from orderflow import tracing
from orderflow.client_text import visible

logger = logging.getLogger("orderflow.telemetry")  # the package's one logger, as filters name it

LOGGER_NAME: Final = "orderflow"
"""Root of the loggers whose records :func:`configure_telemetry` exports."""
CONNECTION_STRING_ENV: Final = "APPLICATIONINSIGHTS_CONNECTION_STRING"
"""Environment variable holding the Application Insights connection string (read by the SDK too)."""

FUNCTIONS_WORKER_TELEMETRY_ENV: Final = "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"
"""Functions app setting with which the Python worker configures the Azure Monitor distro itself."""

_configured = False
_configure_lock = threading.Lock()

_ONE_LINE_MARK: Final = "_orderflow_one_line"


def guard_log_records() -> None:
    """Make every log record this process creates from now on one line of printable text: a message
    whose rendered text holds a character :func:`orderflow.client_text.visible` escapes (a client's
    message id with a line break or an ESC in it, say) gets that escaped text as its message, so no
    handler can write it as two lines or send a terminal a control sequence. A traceback keeps its lines.

    Wraps the record factory in place (``logging.setLogRecordFactory``), once per process however often
    it is called; :func:`configure_telemetry` calls it, so both hosts do, and the CLI does.
    """
    with _configure_lock:
        previous = logging.getLogRecordFactory()
        if getattr(previous, _ONE_LINE_MARK, False):
            return

        def one_line(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                message = record.getMessage()
            except Exception:  # arguments that do not fit the format: the handler reports it, as ever
                return record
            shown = visible(message)
            if shown != message:
                record.msg, record.args = shown, ()
            return record

        setattr(one_line, _ONE_LINE_MARK, True)
        logging.setLogRecordFactory(one_line)


def configure_telemetry(service_name: str, connection_string: str | None = None) -> bool:
    """Export metrics and the ``orderflow`` loggers' records to Application Insights, once per process;
    first, in any case, make every log record one line (:func:`guard_log_records`).

    With a connection string (the argument, else ``APPLICATIONINSIGHTS_CONNECTION_STRING``) this calls
    ``azure.monitor.opentelemetry.configure_azure_monitor`` with ``logger_name="orderflow"`` and the
    service name as the resource's ``service.name`` (Application Insights' cloud role name). Later calls
    return True without configuring again.

    In an Azure Functions worker started with ``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true`` the
    worker has already configured the distro before importing the app (its logger is the root logger,
    or ``PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME``); configuring it again would export everything twice,
    so this only returns True.

    The distro exports orderflow's spans too (:mod:`orderflow.tracing`). Without a connection string,
    :func:`orderflow.tracing.configure_tracing` installs the local export ``OTEL_TRACES_EXPORTER`` asks
    for (``console`` or ``otlp``; none by default).

    Args:
        service_name: ``service.name`` of this process, e.g. ``orderflow-functions``.
        connection_string: Application Insights connection string; None reads the environment.

    Returns:
        True if telemetry is exported (configured now, earlier, or by the Functions worker); False when
        no connection string is set (local runs: nothing is configured) or the distro refused the
        configuration (logged at ERROR; the process goes on without export).
    """
    global _configured  # noqa: PLW0603 - the distro installs process-wide providers, once
    guard_log_records()
    with _configure_lock:
        if _configured:
            return True
        if os.environ.get(FUNCTIONS_WORKER_TELEMETRY_ENV, "").strip().lower() == "true":
            _configured = True
            return True
        connection = (connection_string or os.environ.get(CONNECTION_STRING_ENV) or "").strip()
        if not connection:
            # Local runs: spans to the console or an OTLP endpoint when OTEL_TRACES_EXPORTER says so.
            tracing.configure_tracing(service_name)
            return False
        # Imported here: the distro and the SDK are heavy, and unused without a connection string.
        from azure.monitor.opentelemetry import configure_azure_monitor  # noqa: PLC0415
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource  # noqa: PLC0415

        try:
            configure_azure_monitor(
                connection_string=connection,
                logger_name=LOGGER_NAME,
                resource=Resource.create({SERVICE_NAME: service_name}),
            )
        except Exception:
            logger.exception("Azure Monitor telemetry could not be configured; continuing without export")
            return False
        _configured = True
        return True
