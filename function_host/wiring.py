"""The Azure host's wiring: the one place the worker process builds its dependencies.

:func:`dependencies` builds the adapters once per worker process from the app settings, with
identity-based connections (``DefaultAzureCredential``, :func:`orderflow.wiring.connect_azure`): Cosmos
DB for the stores (and the alerts the process raises, through its alert sink), Service Bus for every
queue. No keys. The blueprints call it (and
:func:`redelivery`, :func:`token_validator`) on each invocation; tests replace those names in a
blueprint to wire it in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache, partial

from function_host.settlement import Redelivery
from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.breaker import circuit_breakers
from orderflow.clock import SteadyClock, SystemClock
from orderflow.dependencies import Dependencies
from orderflow.operator_auth import TokenValidator, validator_from_settings
from orderflow.queues.servicebus import ServiceBusQueueFactory
from orderflow.settings import Settings
from orderflow.store_clock import store_timed
from orderflow.wiring import connect_azure


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The worker process's settings from ``env`` (default: ``os.environ``), as the Functions host runs
    them: one response queue shared by every instance, ``AGENT_RESPONSES_QUEUE``, the one the response
    trigger listens on, whatever ``HOST_ID`` names (``AGENT_RESPONSES_PER_HOST`` is false here).

    Raises:
        pydantic.ValidationError: a value has the wrong type.
    """
    return Settings.load(env, AGENT_RESPONSES_PER_HOST=False)


@cache
def _connections() -> tuple[Dependencies, ServiceBusQueueFactory]:
    settings = load_settings()
    stores, queues = connect_azure(settings)
    # Every role runs on the state store's time, measured through the machine's clock as it read at
    # start and has advanced since: a wall-clock step cannot shift a deadline.
    probe = partial(stores.breakers.clock_probe, settings.queues.HOST_ID)
    states, clock = store_timed(
        stores.state, SteadyClock(SystemClock()), settings.alerts, settings.queues.HOST_ID, probe=probe
    )
    deps = Dependencies(
        states=states,
        orders=stores.orders,
        queues=queues,
        clock=clock,
        settings=settings,
        breakers=circuit_breakers(stores.breakers, clock, settings.breakers, settings.queues.HOST_ID),
        dead_letters=queues,  # the operator API reads the $DeadLetterQueue sub-queues
        alerts=stores.alerts,
    )
    # Every alert the worker raises from now on is kept too, best effort (orderflow.alert_sink).
    telemetry.use_alert_sink(
        AlertSink(stores.alerts, clock, settings.queues.HOST_ID, window_s=settings.alerts.ALERT_WINDOW_S)
    )
    return deps, queues


def dependencies() -> Dependencies:
    """The worker process's adapters and settings, built on first use from the app settings."""
    return _connections()[0]


def redelivery() -> Redelivery:
    """How the worker process redelivers a trigger-delivered message with a delay: through its own
    Service Bus client (:meth:`orderflow.queues.servicebus.ServiceBusQueueFactory.redeliver`)."""
    return _connections()[1]


@cache
def token_validator() -> TokenValidator | None:
    """The worker process's check of operator API bearer tokens, built once (it caches the tenant's signing
    keys); None when the ``OPERATOR_*`` settings do not configure the API (it then refuses every call)."""
    return validator_from_settings(dependencies().settings.operator_api, dependencies().settings.clients)
