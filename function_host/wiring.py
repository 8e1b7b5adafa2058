"""The Azure host's wiring: the one place the worker process builds its dependencies.

:func:`app_settings` loads the app settings once per worker process, and :func:`dependencies` builds the
adapters from them once, with
identity-based connections (``DefaultAzureCredential``, :func:`connect_azure`): Cosmos
DB for the stores (and the alerts the process raises, through its alert sink), Service Bus for every
queue. No keys. The blueprints call it (and
:func:`app_settings`, :func:`redelivery`, :func:`token_validator`) on each invocation, and hand each role
the settings sections it reads; tests replace those names in a blueprint to wire it in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache, partial

from function_host.azure_policy import check_azure
from function_host.settlement import Redelivery
from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.breaker import circuit_breakers
from orderflow.clock import SteadyClock, SystemClock
from orderflow.dependencies import Dependencies
from orderflow.operator_auth import TokenValidator, validator_from_settings
from orderflow.queues.servicebus import ServiceBusQueueFactory
from orderflow.settings import Settings, on_azure
from orderflow.store_clock import store_timed
from orderflow.stores.cosmos import CosmosStores
from orderflow.wiring import azure_credential, connect_stores, store_timeouts


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The worker process's settings from ``env`` (default: ``os.environ``), as the Functions host runs
    them: one response queue shared by every instance, ``AGENT_RESPONSES_QUEUE``, the one the response
    trigger listens on, whatever ``HOST_ID`` names (``AGENT_RESPONSES_PER_HOST`` is false here).

    Raises:
        pydantic.ValidationError: a value has the wrong type.
    """
    return Settings.load(env, AGENT_RESPONSES_PER_HOST=False)


@cache
def app_settings() -> Settings:
    """The worker process's settings (:func:`load_settings` of the app settings), loaded on first use.

    Raises:
        pydantic.ValidationError: a value has the wrong type.
    """
    return load_settings()


@cache
def _connections() -> tuple[Dependencies, ServiceBusQueueFactory]:
    settings = app_settings()
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
    """The worker process's adapters, built on first use from the app settings."""
    return _connections()[0]


def redelivery() -> Redelivery:
    """How the worker process redelivers a trigger-delivered message with a delay: through its own
    Service Bus client (:meth:`orderflow.queues.servicebus.ServiceBusQueueFactory.redeliver`)."""
    return _connections()[1]


@cache
def token_validator() -> TokenValidator | None:
    """The worker process's check of operator API bearer tokens, built once (it caches the tenant's signing
    keys); None when the ``OPERATOR_*`` settings do not configure the API (it then refuses every call)."""
    settings = app_settings()
    return validator_from_settings(settings.operator_api, settings.clients)


def connect_azure(
    settings: Settings, *, environ: Mapping[str, str] | None = None
) -> tuple[CosmosStores, ServiceBusQueueFactory]:
    """The Functions app's adapters: Cosmos DB for both stores, Service Bus for every queue.

    Identity by default, one ``DefaultAzureCredential`` (:func:`orderflow.wiring.azure_credential`) for
    both. An emulator's secret only where the settings name one: ``COSMOS_KEY`` for Cosmos DB (containers are
    then created) and ``SERVICEBUS`` for Service Bus, which wins over
    ``SERVICEBUS__fullyQualifiedNamespace`` as it does for the Functions host's triggers. On Azure
    (:func:`~orderflow.settings.on_azure` of ``environ``, default ``os.environ``) the settings are
    checked first (:func:`function_host.azure_policy.check_azure`), so only identity gets through.

    Raises:
        UnsafeAzureSetting: on Azure, a setting with no safe value there.
        ValueError: ``COSMOS_ENDPOINT``, or both ``SERVICEBUS`` and its namespace, are empty.
    """
    if on_azure(environ):
        check_azure(settings)
    connection_string = settings.connections.SERVICEBUS.strip()
    namespace = settings.connections.SERVICEBUS__fullyQualifiedNamespace.strip()
    if not settings.connections.COSMOS_ENDPOINT.strip():
        raise ValueError("COSMOS_ENDPOINT is not set")
    if not connection_string and not namespace:
        raise ValueError("SERVICEBUS__fullyQualifiedNamespace (or SERVICEBUS, for the emulator) is not set")
    needs_identity = not settings.connections.COSMOS_KEY.strip() or not connection_string
    credential = azure_credential(settings.connections) if needs_identity else None
    if settings.connections.COSMOS_KEY.strip():
        stores = connect_stores(settings.connections)
    else:
        assert credential is not None
        # Data-plane RBAC cannot create databases or containers: infrastructure does.
        stores = CosmosStores.connect(
            settings.connections.COSMOS_ENDPOINT,
            credential=credential,
            database=settings.connections.COSMOS_DATABASE,
            verify_tls=settings.connections.COSMOS_VERIFY_TLS,
            **store_timeouts(settings.connections),
        )
    try:
        if connection_string:
            # No administration client: azure-servicebus's speaks https only, the emulator no TLS.
            queues = ServiceBusQueueFactory.from_connection_string(
                connection_string, send_timeout_s=settings.connections.QUEUE_READ_TIMEOUT_S
            )
        else:
            assert credential is not None
            queues = ServiceBusQueueFactory.from_namespace(
                namespace, credential, send_timeout_s=settings.connections.QUEUE_READ_TIMEOUT_S
            )
    except BaseException:
        stores.close()
        raise
    return stores, queues
