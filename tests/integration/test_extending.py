"""docs/extending.md, "Add a step", followed to the letter: a fourth step on a new service.

A ``notify`` service (tests/notify_service.py: token-checked, idempotent by key, undone by the forward
call's key), its binding in ``SERVICE_BINDINGS``, and the step in a new workflow version, ``order-v5``,
registered beside the built-in ones through :func:`orderflow.workflows.register_workflow`. Orders run
through it end to end on the local host (in memory and on the emulators): one completes all four steps;
one is declined before the new step, which never runs; one the new service refuses, which undoes the
charge and the reservation; one whose shipment is refused after it, which undoes the new step as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from demo.services.auth import AgentAuth
from demo.services.bindings import demo_bindings_json
from devhost.service_credential import LocalAgentCredential
from devhost.serving import serve_in_thread, server_url, stop
from orderflow.bindings import ServiceBinding, ServiceBindings, binding_refusals
from orderflow.records import ProcessState, StepStatus
from orderflow.workflows import (
    ORDER_V1,
    WORKFLOWS,
    StepDefinition,
    WorkflowDefinition,
    agent_names,
    register_workflow,
    withdraw_workflow,
)
from tests.harness import running_system
from tests.host_deps import HostDeps
from tests.notify_service import NOTIFY_AUDIENCE, Notifier, notify_app
from tests.operator_tokens import local_issuer, signing_key

pytestmark = pytest.mark.integration

ORDER_V5 = WorkflowDefinition(
    version="order-v5",
    steps=(
        ORDER_V1.steps[0],  # reserve_inventory
        ORDER_V1.steps[1],  # charge_payment
        StepDefinition("notify_customer", agent="notify", operation="notify", undo="retract"),
        ORDER_V1.steps[2],  # create_shipment: irreversible, so it stays last
    ),
)
"""The new version: order-v1 with the customer notified before the shipment; undone in reverse."""

SCOPE = f"{NOTIFY_AUDIENCE}/.default"
"""The scope the notify binding asks the agents' tokens for."""


def notify_binding(url: str) -> dict[str, Any]:
    """The ``notify`` entry of ``SERVICE_BINDINGS``, as the guide writes it."""
    return {
        "baseUrl": url,
        "auth": {"mode": "entra", "scope": SCOPE},
        "timeoutS": 5,
        "operations": {
            "notify": {"method": "POST", "path": "/notifications", "result": ["notificationId"]},
            "retract": {
                "method": "POST",
                "path": "/notifications/retract",
                "result": ["undone", "reason", "notificationId"],
            },
        },
    }


@pytest.fixture
def order_v5() -> Iterator[WorkflowDefinition]:
    """``order-v5``, registered for the test; or the product's own, once it has taken the example in."""
    if WORKFLOWS.get(ORDER_V5.version) == ORDER_V5:
        yield ORDER_V5
        return
    register_workflow(ORDER_V5)
    try:
        yield ORDER_V5
    finally:
        withdraw_workflow(ORDER_V5.version)


@pytest.fixture
def notify_service() -> Iterator[tuple[Notifier, str]]:
    """The notify service on a loopback port of its own, trusting the agents' local tokens for its
    own audience."""
    notifier = Notifier()
    auth = AgentAuth.trusting(local_issuer(), audience=NOTIFY_AUDIENCE)
    server, thread = serve_in_thread(notify_app(notifier, auth))
    try:
        yield notifier, server_url(server)
    finally:
        stop(server, thread)


def test_start_up_refuses_the_new_step_until_its_service_is_bound(order_v5: WorkflowDefinition) -> None:
    assert WORKFLOWS["order-v5"] == order_v5
    assert "notify" in agent_names()
    demo = ServiceBindings.parse(demo_bindings_json("http://127.0.0.1:8082")).services
    demo_only = ServiceBindings(services={name: b for name, b in demo.items() if name != "notify"})
    assert list(binding_refusals(demo_only, WORKFLOWS.values(), azure=False)) == [
        "notify: no mapping for operation 'notify'",
        "notify: no mapping for operation 'retract'",
    ]
    notify = ServiceBinding.model_validate(notify_binding("http://notify:8080"))
    bound = ServiceBindings(services={**demo_only.services, "notify": notify})
    assert list(binding_refusals(bound, WORKFLOWS.values(), azure=False)) == []


def test_the_notify_service_takes_only_the_agents_tokens_for_its_audience(
    notify_service: tuple[Notifier, str],
) -> None:
    notifier, url = notify_service
    agents = LocalAgentCredential(signing_key())
    cases = {
        "no token": None,
        "another audience": agents.get_token_info("api://orderflow-demo-services/.default").token,
        "no app role": LocalAgentCredential(signing_key(), roles=()).get_token_info(SCOPE).token,
        "the agents'": agents.get_token_info(SCOPE).token,
    }
    answers = {
        name: httpx.post(
            f"{url}/notifications",
            json={"orderId": "o-1"},
            headers={
                "Idempotency-Key": "o-1:notify_customer",
                **({"Authorization": f"Bearer {token}"} if token else {}),
            },
            timeout=5,
        )
        for name, token in cases.items()
    }
    assert {name: (a.status_code, a.json().get("error")) for name, a in answers.items()} == {
        "no token": (401, "invalid_token"),
        "another audience": (401, "invalid_token"),
        "no app role": (403, "missing_role"),
        "the agents'": (201, None),
    }
    assert [n["orderId"] for n in notifier.notifications.values()] == ["o-1"]


def test_orders_run_through_the_fourth_step_and_its_compensation(
    deps: HostDeps, order_v5: WorkflowDefinition, notify_service: tuple[Notifier, str]
) -> None:
    notifier, url = notify_service
    bindings = {"notify": notify_binding(url)}
    with running_system(deps, more_bindings=bindings, WORKFLOW_VERSION=order_v5.version) as system:
        notifier.unreachable.add(system.key("tpch-3"))
        orders = {o.order_id: o for o in system.catalog.orders}
        system.submit_all(["tpch-1", "tpch-2", "tpch-3"])
        # A carrier the shipping service refuses: the refusal comes after the notification.
        camel = replace(orders["tpch-32"], carrier="CAMEL")
        system.client.submit(camel.to_submission(system.client.reply_queue))
        records = system.wait_settled(["tpch-1", "tpch-2", "tpch-3", "tpch-32"], timeout_s=60)
        keys = {order_id: system.key(order_id) for order_id in records}
        audit = system.audit()
    assert {r.workflow_version for r in records.values()} == {"order-v5"}
    assert {o: r.process_state for o, r in records.items()} == {
        "tpch-1": ProcessState.PROCESSED,
        "tpch-2": ProcessState.COMPENSATED,
        "tpch-3": ProcessState.COMPENSATED,
        "tpch-32": ProcessState.COMPENSATED,
    }
    done = records["tpch-1"]
    assert list(done.steps) == list(order_v5.step_names)
    assert [s.status for s in done.steps.values()] == [StepStatus.COMPLETED] * 4
    sent = done.steps["notify_customer"].result
    assert sent is not None and notifier.notifications[sent["notificationId"]]["key"] == (
        f"{keys['tpch-1']}:notify_customer"
    )
    assert notifier.active(keys["tpch-1"]) == 1
    # Declined at the charge: the new step never ran, and only the reservation is undone.
    declined = records["tpch-2"]
    assert declined.steps["notify_customer"].status is StepStatus.NOT_STARTED
    assert [e.step for e in declined.compensation_log] == ["reserve_inventory"]
    assert not any(k.startswith(keys["tpch-2"]) for k in notifier.answers)
    # The new service refused: its permanent refusal undoes the charge, then the reservation.
    refused = records["tpch-3"]
    assert refused.last_error is not None
    assert (refused.last_error.kind, refused.last_error.code, refused.last_error.step) == (
        "permanent",
        "recipient_unreachable",
        "notify_customer",
    )
    assert refused.steps["notify_customer"].status is StepStatus.FAILED
    assert {e.step: e.status for e in refused.compensation_log} == {
        "reserve_inventory": "Compensated",
        "charge_payment": "Compensated",
    }
    # The shipment refused after the notification: the notification is retracted with the rest.
    late = records["tpch-32"]
    assert late.last_error is not None and late.last_error.code == "unknown_carrier"
    assert {e.step: e.status for e in late.compensation_log} == {
        "reserve_inventory": "Compensated",
        "charge_payment": "Compensated",
        "notify_customer": "Compensated",
    }
    retracted = next(e for e in late.compensation_log if e.step == "notify_customer")
    assert retracted.undo_result is not None and retracted.undo_result["undone"] == "true"
    assert notifier.active(keys["tpch-32"]) == 0
    assert notifier.answers[f"{keys['tpch-32']}:notify_customer:undo"][1][0] == 200
    assert audit["duplicate_effects"] == 0
