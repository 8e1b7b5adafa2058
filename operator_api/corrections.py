"""An operator's corrected input for a resubmit (``resubmit --input``; docs/operator-api.md).

The order document stays as the client sent it: its content hash answers the client's duplicate
submissions, so it is never rewritten. A correction is kept in the state record instead
(:class:`orderflow.records.InputCorrection`), written in the resubmit's one ETag-conditional write, and
the corrected step's next call is built from the document with the step's corrections laid over it
(:func:`orderflow.step_requests.request_payload`).

A correction is accepted when all of these hold, checked in this order:

- the order is ``Error`` and its failed step (``lastError.step``) was refused by its remote service
  (:func:`orderflow.effects.refused`: a permanent error, so the refused call applied nothing). A step
  whose outcome is unknown (it timed out, or its attempt died: an ``Error`` past a point of no return) is
  not corrected: the corrected call goes under a new idempotency key, and could apply a second effect
  beside one the old call may have applied;
- the step declares every field given correctable (:attr:`orderflow.workflows.StepDefinition.correctable`);
- each value passes the constraints of the submitted order's field (:class:`orderflow.messages.SubmitOrder`,
  validated whole with the correction laid over the document, so its cross-field rules hold too).

The step gets the idempotency key ``{orderId}:{step}:correction-{n}``
(:func:`orderflow.protocol.keys.corrected_key`) in the same write, and goes back to its own provider (not its
fallback): under the failed call's key the remote service would answer with its stored refusal, or
refuse the new body as a key reused; every later call of the corrected step (a retry, a redelivery, a
recovered attempt) carries the new key, so the service still deduplicates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orderflow.effects import refused
from orderflow.errors import InvalidMessage
from orderflow.messages import SubmitOrder, validate_message
from orderflow.operator_auth import Principal
from orderflow.protocol.keys import corrected_key
from orderflow.records import InputCorrection, OrderDocument, ProcessState, StateRecord, client_order_id
from orderflow.workflows import workflow_for

INPUT_NOT_CORRECTABLE = "InputNotCorrectable"
"""Refusal (409): the order, its failed step or a field given takes no correction."""
INVALID_INPUT = "InvalidInput"
"""Refusal (422): a corrected value breaks the constraints of the order's field."""


@dataclass(frozen=True)
class CorrectionRefused:
    """Why a correction was refused: ``code`` (:data:`INPUT_NOT_CORRECTABLE`, :data:`INVALID_INPUT`) and a
    message for people."""

    code: str
    detail: str


def submitted_content(order: OrderDocument) -> dict[str, Any]:
    """The order document as the :class:`SubmitOrder` body it was made from (wire names)."""
    return {
        "schemaVersion": 1,
        "orderId": client_order_id(order.order_id),
        "customerId": order.customer_id,
        "customerName": order.customer_name,
        "currency": order.currency,
        "amount": format(order.amount, "f"),
        "items": [{"sku": item.sku, "quantity": item.quantity} for item in order.items],
        "carrier": order.carrier,
        "replyTo": order.reply_to,
    }


def _refused_step(record: StateRecord) -> str | CorrectionRefused:
    """The failed step a correction would apply to, or why there is none to correct."""
    if record.process_state is not ProcessState.ERROR:
        return CorrectionRefused(
            INPUT_NOT_CORRECTABLE, f"order is {record.process_state.value}: only Error orders take input"
        )
    error = record.last_error
    step = error.step if error is not None else None
    if step is None or step not in record.steps or not refused(record, step):
        return CorrectionRefused(
            INPUT_NOT_CORRECTABLE,
            f"the failed step {step or '(none)'} was not refused by its service: it may have taken effect "
            "under its key, and a corrected call is a new call; resubmit without input, or compensate",
        )
    return step


def correct_input(
    record: StateRecord,
    order: OrderDocument,
    corrected: dict[str, Any],
    principal: Principal,
    now: datetime,
) -> CorrectionRefused | None:
    """Record ``corrected`` (wire name -> value) for the failed step of ``record``, in place, or say why
    not (nothing changed then). See the module docstring for the rules.

    Args:
        record: The ``Error`` record, a private copy about to be written.
        order: The order's document (the values corrected are laid over it to validate them).
        corrected: The fields and values the operator gave (at least one).
        principal: The verified operator.
        now: The write's time (UTC).
    """
    step = _refused_step(record)
    if isinstance(step, CorrectionRefused):
        return step
    allowed = workflow_for(record.workflow_version).step(step).correctable
    refused_fields = sorted(set(corrected) - set(allowed))
    if refused_fields:
        may = ", ".join(allowed) if allowed else "none"
        return CorrectionRefused(
            INPUT_NOT_CORRECTABLE,
            f"{step} takes no correction of {', '.join(refused_fields)} (it takes: {may})",
        )
    try:
        valid = validate_message(SubmitOrder, {**submitted_content(order), **corrected})
    except InvalidMessage as invalid:
        return CorrectionRefused(INVALID_INPUT, invalid.description)
    values = valid.model_dump(mode="json", by_alias=True)
    number = max((c.number for c in record.corrections), default=0) + 1
    key = corrected_key(record.order_id, step, number)
    record.corrections.append(
        InputCorrection(
            number=number,
            step=step,
            input={name: values[name] for name in corrected},
            idempotency_key=key,
            by=principal.audit_id,
            by_name=principal.display_name or None,
            at=now,
        )
    )
    state = record.steps[step]
    state.idempotency_key = key
    state.fallback = False
    state.last_instance = None
    return None
