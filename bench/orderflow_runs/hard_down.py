"""One demo service hard down: the in-process system while a service answers every call 503, and the
calls each order made to it, with and without circuit breakers."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from bench.load import run_orderflow_load
from bench.orderflow_runs.counts import counted_system
from bench.stats import at_most
from bench.workload import submissions
from demo.faults import FaultPlan
from demo.tpch import DemoOrder
from devhost.emulators import LocalEndpoints
from orderflow.records import client_order_id, order_key

HARD_DOWN_SETTINGS: dict[str, str] = {
    "SUPERVISOR_INTERVAL_S": "0.5",
    "SUPERVISOR_BACKOFF_INITIAL_S": "0.2",
    "SUPERVISOR_BACKOFF_MAX_S": "1",
    "SUPERVISOR_EXTENDED_BACKOFF_S": "1",
    "STARTER_INTERVAL_S": "0.2",
    "AGENT_BACKOFF_INITIAL_S": "0.05",
    "AGENT_BACKOFF_MAX_S": "0.2",
}
"""Shorter back-offs (supervisor and agent) for the hard-down run, so an order exhausts its attempts in
seconds rather than minutes. The calls an order makes do not depend on them: the retry budget, the calls
reserved per step attempt and ``SUPERVISOR_MAX_FAILURES`` decide those.

The poison guard stays on, at its default: a dead service's ``transient_exhausted`` never counts as an
order failing the same way (supervisor.poison.NOT_THE_ORDERS), so each order runs to its give-up."""

HARD_DOWN_BREAKER_SETTINGS: dict[str, str] = {
    "BREAKER_OPEN_S": "2",
    "BREAKER_OPEN_MAX_S": "4",
    "BREAKER_MAX_WAIT_S": "10",
    "BREAKER_CACHE_S": "0.2",
}
"""The circuit breaker's timings in the hard-down run with the breaker, shortened as the back-offs are
(a probe every 2-4 s, orders given up after 10 s of waiting instead of 15 minutes), so the run ends in
seconds. ``BREAKER_FAILURES_TO_OPEN`` keeps its default. The run without the breaker sets
``BREAKER_ENABLED=false``: every order retries the dead service on its own budget, as before breakers."""


def hard_down_calls(
    audit_keys: dict[str, Any], *, service: str | None, order_ids: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Calls each order made to ``service`` (None: to every service), from the demo services' audit:
    ``{orderId: {forward, undo}}``.

    The audit is keyed by idempotency key, ``{orderKey}:{step}`` or ``{orderKey}:{step}:undo``, with the
    order key ``{clientId}:{orderId}``; ``order_ids`` are the clients' own ids (unique in a run).
    """
    calls = {order_id: {"forward": 0, "undo": 0} for order_id in order_ids}
    for key, entry in audit_keys.items():
        order_id = client_order_id(key.removesuffix(":undo").rpartition(":")[0])
        if order_id not in calls:
            continue
        if service is not None and not str(entry.get("endpoint", "")).startswith(f"{service}."):
            continue
        calls[order_id]["undo" if entry.get("undo") else "forward"] += int(entry.get("calls", 0))
    return calls


def hard_down_run(
    *,
    orders: Sequence[DemoOrder],
    endpoints: LocalEndpoints,
    services_url: str,
    service: str,
    timeout_s: float,
    overrides: Mapping[str, str] = HARD_DOWN_SETTINGS,
) -> dict[str, Any]:
    """Calls per order to a service that answers every call 503, against the order's retry budget.

    The demo services' fault plan is set to ``unavailable_services=[service]`` for the run and cleared
    after it. ``overrides`` are settings over the demo's (shorter back-offs by default). Forward calls
    are what the retry budget limits; undo calls (compensation, which spends no budget) are counted apart.

    Returns:
        ``service``, ``orders``, the final ``outcomes``, ``forward_calls`` and ``undo_calls`` (max, mean),
        ``budget`` (the records' ``retryBudget.limit``), ``budget_spent_max``, ``all_forward_calls_max``
        (an order's forward calls to every service) and the target ``forward_calls_within_budget`` (held
        against those).
    """
    tag = f"d{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=services_url, timeout=30) as http:
        http.put("/faults", json=FaultPlan(unavailable_services=(service,)).model_dump(mode="json"))
        try:
            with counted_system(endpoints, services_url, tag=tag, overrides=overrides) as system:
                messages = submissions(orders, run=tag, reply_to=system.client.reply_queue)
                result = run_orderflow_load(
                    system.client, messages, concurrency=len(messages), timeout_s=timeout_s
                )
                order_ids = [str(m["orderId"]) for m in messages]
                (registered,) = system.host.settings.clients.clients()
                keys = [order_key(registered.client_id, order_id) for order_id in order_ids]
                records = [system.host.deps.states.get(key).item for key in keys]
        finally:
            http.put("/faults", json=FaultPlan().model_dump(mode="json"))
        audit = http.get("/audit").json()
    calls = hard_down_calls(audit.get("keys", {}), service=service, order_ids=order_ids)
    forward = [c["forward"] for c in calls.values()]
    undo = [c["undo"] for c in calls.values()]
    # The budget bounds an order's forward calls to every service, not only to the one that is down.
    every = hard_down_calls(audit.get("keys", {}), service=None, order_ids=order_ids)
    all_forward = [c["forward"] for c in every.values()]
    budget = max(record.retry_budget.limit for record in records)
    return {
        "service": service,
        "orders": len(orders),
        "method": "in-process system as for the counts, demo settings with shorter supervisor back-offs; "
        "calls counted by the demo services' audit",
        "outcomes": dict(sorted(result.outcomes.items())),
        "final_states": dict(sorted(Counter(r.process_state.value for r in records).items())),
        "forward_calls": {
            "max": max(forward),
            "mean": round(sum(forward) / len(forward), 2),
            "total": sum(forward),
        },
        "undo_calls": {"max": max(undo), "mean": round(sum(undo) / len(undo), 2)},
        "budget": budget,
        "budget_spent_max": max(record.retry_budget.spent for record in records),
        "all_forward_calls_max": max(all_forward),
        "forward_calls_within_budget": at_most(max(all_forward), budget),
    }


def hard_down_comparison(
    *,
    orders: Sequence[DemoOrder],
    endpoints: LocalEndpoints,
    services_url: str,
    service: str,
    timeout_s: float,
    overrides: Mapping[str, str] = HARD_DOWN_SETTINGS,
    breaker_overrides: Mapping[str, str] = HARD_DOWN_BREAKER_SETTINGS,
) -> dict[str, Any]:
    """The hard-down run twice on the same orders: without circuit breakers, then with them.

    Returns:
        The run without breakers (:func:`hard_down_run`'s fields, as before breakers existed), with
        ``with_breaker``: the same fields for the run with breakers, and ``calls_to_dead_service``:
        forward calls to ``service`` in total and per order, both ways.
    """
    runs = [
        hard_down_run(
            orders=orders,
            endpoints=endpoints,
            services_url=services_url,
            service=service,
            timeout_s=timeout_s,
            overrides=settings,
        )
        for settings in (
            {**overrides, "BREAKER_ENABLED": "false"},
            {**overrides, **breaker_overrides, "BREAKER_ENABLED": "true"},
        )
    ]
    without, with_breaker = runs
    count = max(len(orders), 1)
    totals = {
        "without_breaker": without["forward_calls"]["total"],
        "with_breaker": with_breaker["forward_calls"]["total"],
    }
    return {
        **without,
        "with_breaker": with_breaker,
        "calls_to_dead_service": {
            "total": totals,
            "per_order": {name: round(total / count, 2) for name, total in totals.items()},
        },
    }
