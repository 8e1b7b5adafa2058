"""Activity names, inputs and contracts: what orchestrations and activities agree on.

Names are constants, never repeated literals. Inputs and outputs are small (ids, step names, result
summaries; never documents) because the runtime stores them in the orchestration history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from orderflow.records import UtcDatetime
from orderflow.results import (
    BeginCompensationResult,
    FinishCompensationResult,
    FinishOrderResult,
    RecordReviewResult,
    RecordStepFailureResult,
    StartStepResult,
    StartUndoResult,
)

InputT = TypeVar("InputT", bound=BaseModel)
ResultT = TypeVar("ResultT")

ORDER_WORKFLOW = "order_workflow"
"""Registered name of the order orchestrator, which a claim's start schedules with an
:class:`OrchestrationInput`."""

START_STEP = "start_step"
"""Fenced write: record the previous step's completion, mark the next step Running with its completeBy
(now + the step's timeout), then send the agent request; returns the completeBy for the timer."""

FINISH_ORDER = "finish_order"
"""Fenced write: the order's outcome, then the client's status reply: ``Processed``, or ``Error`` at a
refused step whose input an operator may correct
(:func:`orderflow.compensation_trigger.awaits_correction`)."""

RECORD_STEP_FAILURE = "record_step_failure"
"""Fenced write: a retryable step (or undo) failure; the record stays Processing (or Compensating) with
completeBy = now, so the supervisor recovers it on its next sweep instead of waiting for the old
deadline."""


BEGIN_COMPENSATION = "begin_compensation"
"""Fenced write: forward progress is impossible; record why, move the order to Compensating (or to Error
past a point of no return) and return the steps to undo, in undo order."""

START_UNDO = "start_undo"
"""Fenced write: record the previous undo, mark the next compensation entry Compensating with its
completeBy, then send the undo request to the step's agent; returns the completeBy for the timer."""

FINISH_COMPENSATION = "finish_compensation"
"""Fenced write: Compensated (every entry undone; Cancelled when the client asked for it) or
CompensationFailed (an undo failed for good), then the client's reply (and an operator alert for
CompensationFailed)."""


RECORD_REVIEW = "record_review"
"""Fenced write: the decision on an order awaiting review (the first decision recorded wins), back to
Processing; returns the decision in force."""

REVIEW_EVENT = "ReviewDecision"
"""External event an orchestration awaiting review waits for (raised by the response listener)."""

REVIEW_REJECTED = "review_rejected"
"""``lastError.code`` (kind ``rejected``) of an order whose review was rejected (or defaulted to reject)."""

CANCELLED_BY_CLIENT = "cancelled_by_client"
"""``lastError.code`` (kind ``cancelled``) of an order its client cancelled, and the ``cause`` of a
:class:`~orderflow.results.Stopped` result refused for it."""


def fallback_step_name(step: str) -> str:
    """The pseudo-step a step run on its fallback provider answers as, ``{step}:fallback``."""
    return f"{step}:fallback"


def reacquire_step_name(step: str) -> str:
    """The pseudo-step a hold's re-acquisition answers as, ``{step}:reacquire``: another request of the
    same attempt, so another request id and response event than the step's own."""
    return f"{step}:reacquire"


def undo_step_name(step: str) -> str:
    """The pseudo-step an undo runs as, ``{step}:undo``: it names the request (``{instanceId}:{step}:undo``),
    the response event and the custom status, so the listener's rules apply to undos unchanged."""
    return f"{step}:undo"


class ContractModel(BaseModel):
    """Base of activity payloads: camelCase JSON, immutable, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

    def to_payload(self) -> dict[str, Any]:
        """The JSON-able form handed to the runtime."""
        return self.model_dump(mode="json", by_alias=True)


class StartedStep(ContractModel):
    """A step the claim started and whose agent request the starter sent (docs/design.md §3.2): the
    orchestration waits for its answer at once, with no ``start_step`` activity.

    Attributes:
        step: The step's name (on its primary provider).
        complete_by: The step's ``completeBy`` the claim wrote (UTC): where the durable timer fires.
    """

    step: str
    complete_by: UtcDatetime


class OrchestrationInput(ContractModel):
    """Input of an order orchestration, set by the starter at claim time.

    Attributes:
        order_id: The order.
        attempt: The claimed attempt number; the instance id is ``{orderId}:{attempt}``.
        workflow_version: The definition this record runs with.
        completed_steps: Steps an earlier attempt completed (skipped: their effects exist).
        response_queue: Where agents answer (the claiming host's response queue).
        max_calls: The order's remaining retry budget at claim time.
        step_timeout_s: Seconds per step for steps whose definition sets none (``STEP_TIMEOUT_S``);
            carried in the input because orchestrator code must not read settings.
        compensate: The record is ``Compensating``: this attempt resumes the undo, it runs no step.
        first_step: The step the claim started, whose request the starter sends once the instance is
            scheduled; None: the orchestration starts its first step itself (an input of an earlier
            version has none).
    """

    order_id: str
    attempt: int
    workflow_version: str
    completed_steps: tuple[str, ...] = ()
    response_queue: str
    max_calls: int
    step_timeout_s: float = Field(gt=0)
    compensate: bool = False
    first_step: StartedStep | None = None


class StepResult(ContractModel):
    """A successful step, recorded by the next fenced write.

    Attributes:
        step: The step name.
        result: The agent's result summary (ids, amounts).
        calls: Remote calls the agent made for it.
    """

    step: str
    result: dict[str, str] = Field(default_factory=dict)
    calls: int = 0


class StepError(ContractModel):
    """A failed step's error, short (it lives in history and in ``lastError``)."""

    step: str
    kind: str
    code: str | None = None
    message: str = Field(max_length=500)
    calls: int = 0


class StartStepInput(ContractModel):
    """Input of :data:`START_STEP`.

    Attributes:
        order_id / instance_id: The order and the attempt that must own the record.
        workflow_version: The definition to use.
        step: The step to start.
        timeout_s: Seconds the step may take. The activity sets ``completeBy`` to its own now plus this,
            in the write that starts the step, so the time the activity spent queued behind others does
            not count against the agent; the orchestration's timer fires at the ``complete_by`` returned.
        completed: The previous step's result, recorded in the same write, if any.
        response_queue: Where the agent must answer.
        fallback: Run the step on its fallback provider (the primary refused it permanently).
        reacquired: The answer of a hold's re-acquisition this attempt started (its ``step`` is the
            hold's step), recorded in the same write before the start is decided again.
    """

    order_id: str
    instance_id: str
    workflow_version: str
    step: str
    timeout_s: float = Field(gt=0)
    completed: StepResult | None = None
    response_queue: str
    fallback: bool = False
    reacquired: StepResult | None = Field(default=None, exclude_if=lambda value: value is None)

    def complete_by(self, now: datetime) -> datetime:
        """The step's completeBy for a write made at ``now`` (UTC)."""
        return now + timedelta(seconds=self.timeout_s)


class BeginCompensationInput(ContractModel):
    """Input of :data:`BEGIN_COMPENSATION`.

    Attributes:
        order_id / instance_id / workflow_version: As for :class:`StartStepInput`.
        error: Why forward progress stopped (None when resuming a compensation already begun).
        timeout_s: Seconds until the record's completeBy, should the attempt die before its first undo.
        completed: A step that succeeded but whose completion is not recorded yet: recorded first, so
            its compensation entry exists.
    """

    order_id: str
    instance_id: str
    workflow_version: str
    timeout_s: float = Field(gt=0)
    error: StepError | None = None
    completed: StepResult | None = None


class UndoResult(ContractModel):
    """A successful undo, recorded by the next fenced write (like :class:`StepResult`)."""

    step: str
    result: dict[str, str] = Field(default_factory=dict)
    calls: int = 0


class StartUndoInput(ContractModel):
    """Input of :data:`START_UNDO`.

    Attributes:
        step: The forward step whose compensation entry to undo.
        timeout_s: Seconds the undo may take; its completeBy is the activity's now plus this.
        undone: The previous stage's undo results, recorded in the same write.
        response_queue: Where the agent must answer.
    """

    order_id: str
    instance_id: str
    workflow_version: str
    step: str
    timeout_s: float = Field(gt=0)
    undone: tuple[UndoResult, ...] = ()
    response_queue: str


class FinishCompensationInput(ContractModel):
    """Input of :data:`FINISH_COMPENSATION`: the last stage's undo results, and the error that stopped
    the compensation, if one did."""

    order_id: str
    instance_id: str
    workflow_version: str
    undone: tuple[UndoResult, ...] = ()
    failed: StepError | None = None
    also_failed: tuple[StepError, ...] = ()


class RecordReviewInput(ContractModel):
    """Input of :data:`RECORD_REVIEW`: the decision the orchestration saw (an event, or the default at
    the deadline) and who made it (a reviewer's name, or ``deadline``)."""

    order_id: str
    instance_id: str
    step: str
    decision: str = Field(pattern="^(approve|reject)$")
    decided_by: str


class Outcome(StrEnum):
    """How an order ended, as the orchestration reports it to :data:`FINISH_ORDER`."""

    PROCESSED = "Processed"
    ERROR = "Error"


class FinishOrderInput(ContractModel):
    """Input of :data:`FINISH_ORDER`."""

    order_id: str
    instance_id: str
    workflow_version: str
    outcome: Outcome
    completed: StepResult | None = None
    error: StepError | None = None


class RecordStepFailureInput(ContractModel):
    """Input of :data:`RECORD_STEP_FAILURE`."""

    order_id: str
    instance_id: str
    error: StepError
    at: UtcDatetime


@dataclass(frozen=True)
class ActivityContract(Generic[InputT, ResultT]):
    """One orchestration activity as both sides see it: its registered name, its input model and its
    result union. The workflow calls an activity through its contract; the hosts register the activities
    role's functions under the contracts' names (``activities.table.ACTIVITIES``).

    Attributes:
        name: The activity's registered name (``start_step``).
        input: The input model.
        result: A type adapter for the result union (each case tagged by ``outcome``).
    """

    name: str
    input: type[InputT]
    result: TypeAdapter[ResultT]

    def read_result(self, raw: Any) -> ResultT:
        """The activity's result from its JSON form, as the runtime hands it back.

        Raises:
            pydantic.ValidationError: not a result of this activity (each case is tagged by ``outcome``).
        """
        return self.result.validate_python(raw)

    def result_payload(self, result: ResultT) -> dict[str, Any]:
        """The JSON-able form of ``result`` handed to the runtime."""
        payload: dict[str, Any] = self.result.dump_python(result, mode="json", by_alias=True)
        return payload


START_STEP_ACTIVITY: ActivityContract[StartStepInput, StartStepResult] = ActivityContract(
    START_STEP, StartStepInput, TypeAdapter(StartStepResult)
)
FINISH_ORDER_ACTIVITY: ActivityContract[FinishOrderInput, FinishOrderResult] = ActivityContract(
    FINISH_ORDER, FinishOrderInput, TypeAdapter(FinishOrderResult)
)
RECORD_STEP_FAILURE_ACTIVITY: ActivityContract[RecordStepFailureInput, RecordStepFailureResult] = (
    ActivityContract(
        RECORD_STEP_FAILURE,
        RecordStepFailureInput,
        TypeAdapter(RecordStepFailureResult),
    )
)
RECORD_REVIEW_ACTIVITY: ActivityContract[RecordReviewInput, RecordReviewResult] = ActivityContract(
    RECORD_REVIEW, RecordReviewInput, TypeAdapter(RecordReviewResult)
)
BEGIN_COMPENSATION_ACTIVITY: ActivityContract[BeginCompensationInput, BeginCompensationResult] = (
    ActivityContract(
        BEGIN_COMPENSATION,
        BeginCompensationInput,
        TypeAdapter(BeginCompensationResult),
    )
)
START_UNDO_ACTIVITY: ActivityContract[StartUndoInput, StartUndoResult] = ActivityContract(
    START_UNDO, StartUndoInput, TypeAdapter(StartUndoResult)
)
FINISH_COMPENSATION_ACTIVITY: ActivityContract[FinishCompensationInput, FinishCompensationResult] = (
    ActivityContract(
        FINISH_COMPENSATION,
        FinishCompensationInput,
        TypeAdapter(FinishCompensationResult),
    )
)

ACTIVITY_CONTRACTS: tuple[ActivityContract[Any, Any], ...] = (
    START_STEP_ACTIVITY,
    FINISH_ORDER_ACTIVITY,
    RECORD_STEP_FAILURE_ACTIVITY,
    RECORD_REVIEW_ACTIVITY,
    BEGIN_COMPENSATION_ACTIVITY,
    START_UNDO_ACTIVITY,
    FINISH_COMPENSATION_ACTIVITY,
)
"""Every orchestration activity's contract."""
