"""What one SDK call's measured cost means for an order: each devhost process's SDK floor, and the
serial path of one order.

:func:`sdk_floor` multiplies the CPU of one call (:mod:`bench.sdk_calls`, the ``orderflow`` client) by
the requests each devhost process made per order in a timed window: what its SDK calls alone cost,
before any of orderflow's code, durabletask or gRPC runs. :func:`serial_path_ms` multiplies the wall
time of one call by the requests one order makes one after another (:data:`SERIAL_PATH`): what an order
one at a time waits for those requests alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter

from bench.measure import LOAD_GENERATOR

OPERATIONS: dict[str, tuple[str, str]] = {
    "queue send": ("azurite", "send"),
    "queue receive": ("azurite", "receive"),
    "queue delete": ("azurite", "delete"),
    "cosmos create": ("cosmosdb-server", "create"),
    "cosmos read": ("cosmosdb-server", "read"),
    "cosmos replace": ("cosmosdb-server", "replace"),
    "cosmos query": ("cosmosdb-server", "query"),
}
"""Each measured call -> the emulator and the operation it is counted under (:mod:`bench.counting.http`)."""

SERIAL_PATH: dict[str, int] = {
    "queue send": 9,
    "queue receive": 8,
    "cosmos create": 2,
    "cosmos replace": 4,
}
"""The emulator requests one order makes one after another, from the client's send to its receive of the
final reply (docs/design.md §3): every one of the 9 messages is sent (the order, the ``Received`` reply, 3
agent requests, 3 responses, the final reply); 8 are received on the way (the ``Received`` reply is read
by the client beside the order's path); the order and its state record are created; the claim, two
``start_step`` writes and ``finish_order``'s write replace the record. A message's delete and the reply
outbox's clear come after the next hop has begun, so they are not on the path."""


SERIAL_PATH_SETTINGS: dict[str, bool] = {"CLAIM_ON_SUBMIT": True, "STARTER_SENDS_FIRST_REQUEST": True}
"""The settings :data:`SERIAL_PATH` is counted with (both orderflow's defaults): the submission claims and
starts the order, and sends its first request. With either off an order's path also holds the starter's
query (after its timer), or a ``start_step`` activity's write."""


_BOOLEAN = TypeAdapter(bool)
"""Reads a setting's text as orderflow's settings do (``true``, ``0``, ``off`` ...)."""


def serial_path_settings_off(settings: Mapping[str, str]) -> list[str]:
    """The settings :data:`SERIAL_PATH` is counted with that a run's orderflow setting overrides
    (``BenchConfig.orderflow_settings``) turn off, in :data:`SERIAL_PATH_SETTINGS`' order; a setting
    not overridden keeps its default. Empty: the run's orders took the counted path.

    Raises:
        pydantic.ValidationError: an override is not a boolean (``true``, ``0``, ``off`` ...).
    """
    return [
        name
        for name, value in SERIAL_PATH_SETTINGS.items()
        if _BOOLEAN.validate_python(settings.get(name, str(value))) is not value
    ]


def serial_path_ms(walls: Mapping[str, float]) -> float:
    """The wall time of one order's serial emulator requests (:data:`SERIAL_PATH`) at ``walls``, the
    orderflow client's wall ms per call: what an order one at a time waits for those requests alone,
    before its service calls, durabletask's round trips, the hand-offs between processes and any of
    orderflow's code. Milliseconds, rounded to 0.1; an operation not in ``walls`` counts 0."""
    return round(sum(count * walls.get(call, 0.0) for call, count in SERIAL_PATH.items()), 1)


def floor_ms_per_order(costs: Mapping[str, float], requests: Mapping[str, Mapping[str, float]]) -> float:
    """What a process's requests per order cost at ``costs``: the sum over :data:`OPERATIONS` of
    requests per order times CPU ms per call (requests of any other operation, such as a lock renewal,
    are left out: rare, and not measured here).

    Args:
        costs: One client kind's CPU ms per call, by measured call.
        requests: Requests per order, ``{emulator: {operation: n}}`` (a window's
            ``http_per_order_by_process`` entry).
    """
    total = 0.0
    for call, (emulator, operation) in OPERATIONS.items():
        total += float(requests.get(emulator, {}).get(operation, 0.0)) * costs.get(call, 0.0)
    return round(total, 1)


def sdk_floor(window: Mapping[str, Any], costs: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """What the SDK calls alone cost each devhost process of a measured window, beside what the process
    cost in all; ``"devhosts"`` sums them.

    Args:
        window: A window's ``measured`` figures (``http_per_order_by_process``, ``cpu_ms_per_order``).
        costs: The ``orderflow`` client's CPU ms per call.

    Returns:
        ``{process: {"sdk_calls_ms": ..., "measured_ms": ...}}`` per order.
    """
    by_process = window.get("http_per_order_by_process", {})
    measured = window.get("cpu_ms_per_order", {})
    floors = {
        name: {
            "sdk_calls_ms": floor_ms_per_order(costs, requests),
            "measured_ms": float(measured.get(name, 0.0)),
        }
        for name, requests in by_process.items()
        if name != LOAD_GENERATOR
    }
    floors["devhosts"] = {
        key: round(sum(floor[key] for floor in floors.values()), 1) for key in ("sdk_calls_ms", "measured_ms")
    }
    return floors
