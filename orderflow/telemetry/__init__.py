"""Structured operational events, operator alerts, metrics and their export.

Every role reports what it did through :func:`event` (one log record per event on the ``orderflow.events``
logger) and raises operator alerts through :func:`alert` (``orderflow.alerts``, level ERROR), which also
hands them to the process's alert sink, if one is installed (:func:`use_alert_sink`: the hosts keep alerts
in the alerts store). A record carries the event name as ``event``, the keyword fields as ``fields`` (a
dict) and, flattened, each field as an attribute of its own, ``orderflow.<field>`` (``orderflow.order_id``,
``orderflow.instance_id``, ``orderflow.attempt`` correlate an order across roles), so an exporter turns them
into individual custom dimensions. A field's value in the record's message is quoted when it is not one
printable word (:func:`orderflow.client_text.log_value`), and :func:`guard_log_records` keeps every
record to one line of printable text: a client's text can neither split a record nor add a field to it
(docs/operations.md#client-text). Locally the records go to the console; a test counts the events of a
scope with :func:`recording`.

**Metrics.** The events an operator alerts on also update OpenTelemetry instruments of the ``orderflow``
meter, derived here from the event and alert names so that no call site knows about metrics:

- ``orderflow.recoveries`` (counter): ``recovery`` events (supervisor re-queues); attribute ``step``.
  Its rate is "recoveries per minute".
- ``orderflow.budget_exhausted`` (counter): ``budget.exhausted`` events; attribute ``step``.
- ``orderflow.dead_letters`` (counter): ``message.dead_lettered`` events and ``max_delivery_count``
  alerts; attributes ``queue`` and ``reason`` (``MaxDeliveryCountExceeded`` for the alert).
- ``orderflow.gave_up`` (counter): ``order_gave_up`` alerts (the supervisor gave up an order's forward
  progress and moved it to Compensating); attributes ``step`` and ``reason`` (``retry_budget_exhausted``
  or ``too_many_failures``, the record's ``lastError.code``).
- ``orderflow.orders_failed`` (counter): orders that ended in ``Error``, left to an operator:
  ``past_point_of_no_return`` alerts (forward progress stopped after an irreversible step) and
  ``order_failed`` alerts (``finish_order`` with outcome Error: a refused step whose input an operator
  may correct); attribute ``step``.
- ``orderflow.scan_anomalies`` (counter): ``scan.anomaly`` events (a scanning loop met
  ``SCAN_MAX_EMPTY_PAGES`` empty pages in a row, each with a new continuation token, and ended its pass);
  attribute ``loop`` (``sweep``, ``starter``, ``reply_relay``, ``retention``).
- ``orderflow.lock_renewals_exhausted`` (counter): ``message.lock_renewal_exhausted`` events (a local
  consumer's handler outran ``QUEUE_MAX_LOCK_RENEWAL_S`` and its message was abandoned); attribute
  ``queue``.
- ``orderflow.alerts`` (counter): every alert; attribute ``alert`` (its name).
- ``orderflow.stuck_orders`` (observable gauge): set by :func:`record_stuck_orders` after each
  supervisor sweep; no attributes.

Metric attributes are low-cardinality by construction (step, queue and alert names, dead-letter
reasons); order and instance ids stay in the logs. The instruments are created lazily, on first use,
from the provider given to :func:`use_meter_provider`, or else from OpenTelemetry's global provider
(a no-op until something such as :func:`configure_telemetry` installs one; instruments created earlier
are forwarded to it once it is set).

**Export** (:mod:`orderflow.telemetry.export`). :func:`configure_telemetry` installs the Azure Monitor distro
(azure-monitor-opentelemetry) when an Application Insights connection string is available: metrics,
the ``orderflow`` loggers' records with their flattened fields as custom dimensions, orderflow's spans
(:mod:`orderflow.tracing`) and the distro's dependency tracing. Without one it installs at most the local
trace export ``OTEL_TRACES_EXPORTER`` asks for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from enum import Enum
from typing import Any, Final

from opentelemetry import metrics

from orderflow.client_text import log_value
from orderflow.telemetry.export import CONNECTION_STRING_ENV as CONNECTION_STRING_ENV
from orderflow.telemetry.export import FUNCTIONS_WORKER_TELEMETRY_ENV as FUNCTIONS_WORKER_TELEMETRY_ENV
from orderflow.telemetry.export import LOGGER_NAME as LOGGER_NAME
from orderflow.telemetry.export import configure_telemetry as configure_telemetry
from orderflow.telemetry.export import guard_log_records as guard_log_records

events_logger = logging.getLogger("orderflow.events")
alerts_logger = logging.getLogger("orderflow.alerts")
logger = logging.getLogger(__name__)

METER_NAME: Final = "orderflow"
"""Name of the OpenTelemetry meter (the instrumentation scope) of every orderflow metric."""

FIELD_PREFIX: Final = "orderflow."
"""Prefix of the flattened field attributes of an event's log record: ``orderflow.order_id``."""

STUCK_ORDERS_STALE_S: Final = 300.0
"""Seconds after which an unrefreshed :func:`record_stuck_orders` value stops being reported.

A process that stops sweeping (it lost the supervisor lease, or stopped) must not keep reporting the
count of its last sweep: the gauge goes silent instead of holding an alert open.
"""

RECOVERIES: Final = "orderflow.recoveries"
BUDGET_EXHAUSTED: Final = "orderflow.budget_exhausted"
DEAD_LETTERS: Final = "orderflow.dead_letters"
GAVE_UP: Final = "orderflow.gave_up"
ORDERS_FAILED: Final = "orderflow.orders_failed"
ALERTS: Final = "orderflow.alerts"
SCAN_ANOMALIES: Final = "orderflow.scan_anomalies"
LOCK_RENEWALS_EXHAUSTED: Final = "orderflow.lock_renewals_exhausted"
STUCK_ORDERS: Final = "orderflow.stuck_orders"

MAX_DELIVERY_COUNT_REASON: Final = "MaxDeliveryCountExceeded"
"""The ``reason`` of a dead letter counted from the ``max_delivery_count`` alert (the consumer's reason)."""

_COUNTER_DESCRIPTIONS: Final[Mapping[str, str]] = {
    RECOVERIES: "Expired orders the supervisor put back to Pending for another attempt.",
    BUDGET_EXHAUSTED: "Steps refused because the order's end-to-end retry budget was spent.",
    DEAD_LETTERS: "Messages dead-lettered: invalid, conflicting, or past the maximum delivery count.",
    GAVE_UP: "Expired orders the supervisor moved to Error (too many failures or no retry budget).",
    ORDERS_FAILED: "Orders the orchestration finished in Error.",
    ALERTS: "Operator alerts raised, by alert name.",
    SCAN_ANOMALIES: "Passes of a scanning loop ended by a run of empty pages that each carried a new token.",
    LOCK_RENEWALS_EXHAUSTED: "Messages abandoned because their handler ran past the lock renewal limit.",
}


@dataclass(frozen=True)
class _Derived:
    """One counter increment derived from an event or alert.

    Attributes:
        counter: Metric name, a key of :data:`_COUNTER_DESCRIPTIONS`.
        keys: Event fields copied as metric attributes when present (low-cardinality ones only).
        fixed: Attributes added as they are.
    """

    counter: str
    keys: tuple[str, ...] = ()
    fixed: tuple[tuple[str, str], ...] = ()


_FROM_EVENTS: Final[Mapping[str, _Derived]] = {
    "recovery": _Derived(RECOVERIES, ("step",)),
    "budget.exhausted": _Derived(BUDGET_EXHAUSTED, ("step",)),
    "message.dead_lettered": _Derived(DEAD_LETTERS, ("queue", "reason")),
    "scan.anomaly": _Derived(SCAN_ANOMALIES, ("loop",)),
    "message.lock_renewal_exhausted": _Derived(LOCK_RENEWALS_EXHAUSTED, ("queue",)),
}
_FROM_ALERTS: Final[Mapping[str, _Derived]] = {
    "order_gave_up": _Derived(GAVE_UP, ("step", "reason")),
    "order_failed": _Derived(ORDERS_FAILED, ("step",)),
    "past_point_of_no_return": _Derived(ORDERS_FAILED, ("step",)),
    "max_delivery_count": _Derived(DEAD_LETTERS, ("queue",), (("reason", MAX_DELIVERY_COUNT_REASON),)),
}


def metric_dimensions() -> dict[str, frozenset[str]]:
    """Every metric of the ``orderflow`` meter by name, with the attribute keys it may carry.

    Returns:
        ``{metric name: attribute keys}``, e.g. ``{"orderflow.gave_up": {"step", "reason"}, ...}``; the
        stuck-orders gauge has none. What alert queries may filter on (tests/infra checks them).
    """
    found: dict[str, set[str]] = {name: set() for name in _COUNTER_DESCRIPTIONS}
    found[STUCK_ORDERS] = set()
    found[ALERTS].add("alert")
    for derived in (*_FROM_EVENTS.values(), *_FROM_ALERTS.values()):
        found[derived.counter].update(derived.keys, (key for key, _ in derived.fixed))
    return {name: frozenset(keys) for name, keys in found.items()}


AttributeValue = str | bool | int | float
"""A value OpenTelemetry accepts as a metric or log attribute."""

_recorders: list[Counter[str]] = []
"""The counts of the :func:`recording` scopes open now (none in a host: nothing is counted then)."""
_lock = threading.Lock()


@dataclass
class _Instruments:
    counters: dict[str, metrics.Counter]
    stuck_orders: metrics.ObservableGauge


@dataclass
class _Gauge:
    value: int | None = None
    at: float = 0.0
    """:data:`_monotonic` time of the last :func:`record_stuck_orders`, seconds."""


_meter_provider: metrics.MeterProvider | None = None
_instruments: _Instruments | None = None
_stuck = _Gauge()
_monotonic: Callable[[], float] = time.monotonic
"""Clock of the stuck-orders staleness (tests replace it)."""


def event(name: str, /, **fields: Any) -> None:
    """Record a structured event, count it, and update the metric derived from it, if any.

    Args:
        name: Event name, e.g. ``claim``, ``step.start``, ``step.failed``, ``recovery``.
        **fields: Structured fields; use ``order_id``, ``instance_id``, ``attempt`` for correlation.
            Values should be str, bool, int, float, an enum, a datetime or None (others are logged as
            ``str(value)``; None is left out of the flattened attributes).
    """
    _count(name)
    derived = _FROM_EVENTS.get(name)
    if derived is not None:
        _add(derived, fields)
    if events_logger.isEnabledFor(logging.INFO):
        events_logger.info("%s %s", name, _rendered(fields), extra=_log_extra(name, fields))


def alert(name: str, /, **fields: Any) -> None:
    """Raise an operator alert: an ERROR record on ``orderflow.alerts``, an ``alert.<name>`` count.

    Also adds one to ``orderflow.alerts`` (attribute ``alert=<name>``) and to the metric derived from
    the alert, if any (``orderflow.gave_up``, ``orderflow.orders_failed``, ``orderflow.dead_letters``).

    Args:
        name: Alert name, e.g. ``order_gave_up``, ``order_failed``, ``max_delivery_count``.
        **fields: Structured fields, as for :func:`event`.
    """
    _count(f"alert.{name}")
    instruments = _get_instruments()
    instruments.counters[ALERTS].add(1, {"alert": name})
    derived = _FROM_ALERTS.get(name)
    if derived is not None:
        _add(derived, fields, instruments)
    alerts_logger.error("ALERT %s %s", name, _rendered(fields), extra=_log_extra(f"alert.{name}", fields))
    sink = _alert_sink
    if sink is not None:
        sink(name, fields)


def _rendered(fields: Mapping[str, Any]) -> str:
    """The fields as ``key=value`` pairs, each value a :func:`orderflow.client_text.log_value`: a
    client's text (a message id with a space, an ``=`` or a line break in it) stays one field."""
    return " ".join(f"{key}={log_value(value)}" for key, value in fields.items())


AlertSinkFn = Callable[[str, Mapping[str, Any]], object]
"""Keeps an alert somewhere: ``(name, fields)``; must not raise (:class:`orderflow.alert_sink.AlertSink`)."""

_alert_sink: AlertSinkFn | None = None


def use_alert_sink(sink: AlertSinkFn | None) -> AlertSinkFn | None:
    """Hand every alert raised from now on to ``sink`` too (None: to none), after it is logged.

    One per process, installed by the host's wiring (:mod:`function_host.wiring`, the local host's
    :class:`devhost.host.DevHost`); a test that installs one puts the previous one back.

    Returns:
        The sink installed before.
    """
    global _alert_sink
    with _lock:
        previous, _alert_sink = _alert_sink, sink
    return previous


def _count(name: str) -> None:
    if _recorders:
        with _lock:
            for recorder in _recorders:
                recorder[name] += 1


@contextmanager
def recording() -> Iterator[Counter[str]]:
    """Count every event and alert (as ``alert.<name>``) reported, by any thread, while the ``with``
    block runs: a scope of its own for a test, which needs no reset. Hosts count through metrics.

    Yields:
        The counts, filled in as the events happen.
    """
    counts: Counter[str] = Counter()
    with _lock:
        _recorders.append(counts)
    try:
        yield counts
    finally:
        with _lock:
            _recorders.remove(counts)


def record_stuck_orders(count: int) -> None:
    """Set ``orderflow.stuck_orders``: orders whose ``completeBy`` had passed, as the last sweep saw them.

    The gauge reports the latest value at each metric collection for :data:`STUCK_ORDERS_STALE_S`
    seconds, then nothing until the next call.

    Args:
        count: Expired ``Processing`` records the sweep found (recovered or not), >= 0.

    Raises:
        ValueError: ``count`` is negative.
    """
    if count < 0:
        raise ValueError(f"stuck order count must be >= 0, not {count}")
    _get_instruments()  # the gauge exists from the first sweep on, even before any event
    with _lock:
        _stuck.value = count
        _stuck.at = _monotonic()


def use_meter_provider(provider: metrics.MeterProvider | None) -> None:
    """Create the instruments from ``provider`` from now on (None: OpenTelemetry's global provider).

    OpenTelemetry's global provider can be set only once per process; tests inject an SDK
    ``MeterProvider`` with an ``InMemoryMetricReader`` here instead. The instruments are recreated on
    next use; the last :func:`record_stuck_orders` value is forgotten.

    Args:
        provider: The provider to take the ``orderflow`` meter from, or None for the global one.
    """
    global _meter_provider, _instruments  # noqa: PLW0603 - the module owns one set of instruments
    with _lock:
        _meter_provider = provider
        _instruments = None
        _stuck.value = None
        _stuck.at = 0.0


# --- internals ---------------------------------------------------------------------------------------


def _get_instruments() -> _Instruments:
    global _instruments  # noqa: PLW0603 - created lazily, see use_meter_provider
    with _lock:
        if _instruments is None:
            provider = _meter_provider if _meter_provider is not None else metrics.get_meter_provider()
            meter = provider.get_meter(METER_NAME)
            _instruments = _Instruments(
                counters={
                    name: meter.create_counter(name, unit="1", description=description)
                    for name, description in _COUNTER_DESCRIPTIONS.items()
                },
                stuck_orders=meter.create_observable_gauge(
                    STUCK_ORDERS,
                    callbacks=[_observe_stuck_orders],
                    unit="1",
                    description="Orders whose completeBy had passed, as the last supervisor sweep saw them.",
                ),
            )
        return _instruments


def _observe_stuck_orders(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
    with _lock:
        value, at = _stuck.value, _stuck.at
    if value is None or _monotonic() - at > STUCK_ORDERS_STALE_S:
        return []
    return [metrics.Observation(value)]


def _add(derived: _Derived, fields: Mapping[str, Any], instruments: _Instruments | None = None) -> None:
    attributes: dict[str, AttributeValue] = dict(derived.fixed)
    for key in derived.keys:
        value = _attribute_value(fields.get(key))
        if value is not None:
            attributes[key] = value
    (instruments or _get_instruments()).counters[derived.counter].add(1, attributes)


def _attribute_value(value: Any) -> AttributeValue | None:
    """``value`` as an OpenTelemetry attribute value: None stays None, enums give their value."""
    if value is None:
        return None
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return str(value)  # a plain str, not a str subclass
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _log_extra(name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The ``extra`` of an event's log record: ``event`` and each field flattened
    (``orderflow.<field>``). Never the fields as one dict: whichever way the Azure Monitor distro is
    configured (by :func:`configure_telemetry`, or by the Functions worker itself on Azure), its
    logging handler exports every attribute of a record, a dict as its ``str()``."""
    extra: dict[str, Any] = {"event": name}
    for key, value in fields.items():
        flat = _attribute_value(value)
        if flat is not None:
            extra[f"{FIELD_PREFIX}{key}"] = flat
    return extra
