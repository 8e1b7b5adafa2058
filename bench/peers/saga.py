"""The order saga the peers run: orderflow's current workflow, without its state store or supervisor.

The steps, agents, operations, undo operations and idempotency keys are orderflow's own
(:data:`orderflow.workflows.CURRENT_WORKFLOW`, ``{orderId}:{step}`` and ``{orderId}:{step}:undo``),
and the calls go over httpx to the same demo services through the same client
(:class:`agents.services.HttpRemoteService`), so a peer does the same remote work per order. What a peer
leaves out is what orderflow adds around it: the state record, the queues between roles, the
supervisor, deadlines per step, review and the fallback carrier (none of which the happy path uses).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.services import HttpRemoteService
from demo.services.bindings import demo_bindings
from devhost.service_credential import LocalAgentCredential
from orderflow.bindings import CachedTokens
from orderflow.errors import PermanentError
from orderflow.protocol.keys import idempotency_key, undo_key
from orderflow.workflows import CURRENT_WORKFLOW, StepDefinition

SAGA_STEPS: tuple[StepDefinition, ...] = CURRENT_WORKFLOW.steps
"""reserve_inventory → charge_payment → create_shipment (irreversible), as orderflow runs them."""

CALL_TIMEOUT_S = 5.0
"""HTTP timeout of one remote call (seconds): orderflow's default ``AGENT_CALL_TIMEOUT_S``."""

PROCESSED = "Processed"
COMPENSATED = "Compensated"


@dataclass(frozen=True)
class CompletedStep:
    """What an undo needs of a completed step: its name and its result summary."""

    step: str
    result: dict[str, str]


def step_payload(step: StepDefinition, order: Mapping[str, Any]) -> dict[str, Any]:
    """The request body fields of ``step`` for an order given as its submission message (camelCase).

    The same fields orderflow's ``start_step`` sends (``orderflow.step_requests.request_payload``).

    Raises:
        ValueError: the step's operation is not one of the saga's.
    """
    items = [{"sku": item["sku"], "quantity": item["quantity"]} for item in order["items"]]
    if step.operation == "reserve":
        return {"items": items}
    if step.operation == "charge":
        return {"customerId": order["customerId"], "amount": order["amount"], "currency": order["currency"]}
    if step.operation == "ship":
        return {"carrier": order["carrier"], "items": items}
    raise ValueError(f"the saga has no operation {step.operation!r}")


class SagaServices:
    """One HTTP client per agent of the saga, over the demo services at ``base_url``, bound and
    authenticated as the agents are (:func:`demo.services.bindings.demo_bindings`, local issuer tokens).

    Thread-safe (httpx clients are); close it when done.
    """

    def __init__(self, base_url: str) -> None:
        bindings = demo_bindings(base_url).services
        tokens = CachedTokens(LocalAgentCredential.from_key_file())
        self._services = {
            step.agent: HttpRemoteService(step.agent, bindings[step.agent], tokens=tokens)
            for step in SAGA_STEPS
        }

    def run_step(self, step_name: str, order: Mapping[str, Any]) -> dict[str, str]:
        """Call ``step_name``'s operation once with the step's stable idempotency key.

        Returns:
            The service's result summary.

        Raises:
            TransientError, PermanentError: as :meth:`HttpRemoteService.call`.
        """
        step = _step(step_name)
        order_id = str(order["orderId"])
        return self._services[step.agent].call(
            step.operation,
            step_payload(step, order),
            order_id=order_id,
            idempotency_key=idempotency_key(order_id, step.name),
            timeout_s=CALL_TIMEOUT_S,
        )

    def undo_step(self, done: CompletedStep, order_id: str) -> dict[str, str]:
        """Undo a completed step by its forward key, under the step's undo key.

        Raises:
            PermanentError: the step cannot be undone (irreversible), or the service refused.
            TransientError: as :meth:`HttpRemoteService.call`.
        """
        step = _step(done.step)
        if step.undo is None or step.irreversible:
            raise PermanentError("irreversible", f"{step.name} cannot be undone")
        return self._services[step.agent].call(
            step.undo,
            {"forwardKey": idempotency_key(order_id, step.name), **done.result},
            order_id=order_id,
            idempotency_key=undo_key(order_id, step.name),
            timeout_s=CALL_TIMEOUT_S,
        )

    def close(self) -> None:
        """Close every client's connections."""
        for service in self._services.values():
            service.close()


def _step(name: str) -> StepDefinition:
    for step in SAGA_STEPS:
        if step.name == name:
            return step
    raise KeyError(f"the saga has no step {name!r}")
