"""What each orchestration activity reports: one tagged union per activity, named for what happened.

Every result carries ``outcome``, its tag, so the workflow matches on the case instead of reading flags.
A fenced-out write is a normal protocol outcome, not a failure (docs/design.md §3.3): the activity returns
:class:`Fenced` instead of raising, so runtime retry policies never retry it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from orderflow.records import UtcDatetime


class ResultModel(BaseModel):
    """Base of activity results: camelCase JSON, immutable, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

    def to_payload(self) -> dict[str, Any]:
        """The JSON-able form handed to the runtime."""
        return self.model_dump(mode="json", by_alias=True)


class Fenced(ResultModel):
    """Nothing was written: the record belongs to another attempt, or is already settled.

    Attributes:
        reason: Why (``lockedBy o-1:2``, ``processState is Processed``).
    """

    outcome: Literal["fenced"] = "fenced"
    reason: str


class Stopped(ResultModel):
    """Nothing was written: someone asked the order to stop (``cancelRequestedAt``), so the attempt
    compensates instead of going on.

    Attributes:
        cause: The stop's ``lastError.code``: ``cancelled_by_client``, or an operator's code.
    """

    outcome: Literal["stopped"] = "stopped"
    cause: str


class StepStarted(ResultModel):
    """:data:`~orderflow.contracts.START_STEP` started the step (or found it started) and sent the request.

    Attributes:
        complete_by: The step's deadline (UTC) as written in the record; the orchestration's durable timer
            fires at it.
        remaining_calls: The order's retry budget left after the step's reservation.
        fallback: The request went to the step's fallback provider, where the record keeps the step once
            it moved there (in an earlier attempt too): its answer comes as ``{step}:fallback``. Left out
            of the JSON form when false, so a version that predates it (a deployment rolled back) reads
            every other start as before.
    """

    outcome: Literal["started"] = "started"
    complete_by: UtcDatetime
    remaining_calls: int = 0
    fallback: bool = Field(default=False, exclude_if=lambda kept: not kept)


class AwaitingReview(ResultModel):
    """:data:`~orderflow.contracts.START_STEP` paused the order in ``AwaitingReview`` before the step.

    Attributes:
        complete_by: The review's deadline (UTC): the decision ``review_default`` applies then.
        review_default: ``approve`` or ``reject``.
    """

    outcome: Literal["awaiting_review"] = "awaiting_review"
    complete_by: UtcDatetime | None = None
    review_default: Literal["approve", "reject"] = "reject"


class ReviewRejected(ResultModel):
    """:data:`~orderflow.contracts.START_STEP` found the review of this step decided ``reject`` (recorded
    while no attempt waited); nothing was started."""

    outcome: Literal["review_rejected"] = "review_rejected"


class BudgetExhausted(ResultModel):
    """:data:`~orderflow.contracts.START_STEP` did not start the step: the order's end-to-end retry budget
    has no calls left. The previous step's completion, if any, was recorded."""

    outcome: Literal["budget_exhausted"] = "budget_exhausted"


class AwaitingDependency(ResultModel):
    """:data:`~orderflow.contracts.START_STEP` did not start the step: its dependency's circuit breaker is
    open (orderflow.breaker). In the same write the attempt gave the record back: ``Pending`` until
    ``retry_at``, or, past ``BREAKER_MAX_WAIT_S`` of waiting, ``Compensating`` (``gave_up``). The attempt
    ends here without another write; the previous step's completion, if any, was recorded.

    Attributes:
        dependency: The agent whose breaker is open.
        retry_at: When the order is claimed again (UTC).
        gave_up: The order waited too long and is compensated instead.
    """

    outcome: Literal["awaiting_dependency"] = "awaiting_dependency"
    dependency: str
    retry_at: UtcDatetime
    gave_up: bool = False


class ReacquiringHold(ResultModel):
    """:data:`~orderflow.contracts.START_STEP` did not start the step: a hold would lapse before it could
    finish, so in the same write the hold's re-acquisition started (new key, calls reserved) and its
    request went to the hold's agent; it answers as ``{step}:reacquire``. The orchestration starts the
    step again with the answer (``reacquired``).

    Attributes:
        step: The step whose hold is re-acquired.
        complete_by: The re-acquisition's deadline (UTC), where the orchestration's timer fires.
    """

    outcome: Literal["reacquiring_hold"] = "reacquiring_hold"
    step: str
    complete_by: UtcDatetime


class HoldExpired(ResultModel):
    """:data:`~orderflow.contracts.START_STEP` did not start the step: a hold lapses before it could
    finish and may not be re-acquired again (:mod:`orderflow.protocol.holds`). Nothing was written; the
    order is compensated.

    Attributes:
        step: The step whose hold lapsed.
    """

    outcome: Literal["hold_expired"] = "hold_expired"
    step: str


class ReviewRecorded(ResultModel):
    """:data:`~orderflow.contracts.RECORD_REVIEW` recorded the decision, or found one recorded first.

    Attributes:
        decision: The decision in force (``approve`` or ``reject``): the first recorded wins.
    """

    outcome: Literal["review_recorded"] = "review_recorded"
    decision: Literal["approve", "reject"]


class OrderFinished(ResultModel):
    """:data:`~orderflow.contracts.FINISH_ORDER` wrote the outcome (or found it written); the reply is sent
    or owed.

    Attributes:
        remaining_calls: The order's retry budget left.
    """

    outcome: Literal["finished"] = "finished"
    remaining_calls: int = 0


class FailureRecorded(ResultModel):
    """:data:`~orderflow.contracts.RECORD_STEP_FAILURE` recorded the retryable failure, with ``completeBy``
    now, so the supervisor's next sweep recovers the order.

    Attributes:
        remaining_calls: The order's retry budget left.
    """

    outcome: Literal["failure_recorded"] = "failure_recorded"
    remaining_calls: int = 0


class CompensationBegun(ResultModel):
    """:data:`~orderflow.contracts.BEGIN_COMPENSATION` moved the order to ``Compensating``.

    Attributes:
        undo_stages: The steps still to undo, as stages run in order; the steps of one stage are undone
            in parallel.
    """

    outcome: Literal["compensation_begun"] = "compensation_begun"
    undo_stages: tuple[tuple[str, ...], ...] = ()


class PastPointOfNoReturn(ResultModel):
    """:data:`~orderflow.contracts.BEGIN_COMPENSATION` moved the order to ``Error`` instead: an
    irreversible step may have taken effect, so only an operator can complete the order."""

    outcome: Literal["past_point_of_no_return"] = "past_point_of_no_return"


class UndoStarted(ResultModel):
    """:data:`~orderflow.contracts.START_UNDO` started the undo (or found it started) and sent the request.

    Attributes:
        complete_by: The undo's deadline (UTC), where the stage's timer fires.
    """

    outcome: Literal["undo_started"] = "undo_started"
    complete_by: UtcDatetime


class CompensationFinished(ResultModel):
    """:data:`~orderflow.contracts.FINISH_COMPENSATION` wrote the compensation's end (or found it written).

    Attributes:
        process_state: ``Compensated``, ``Cancelled`` or ``CompensationFailed``.
    """

    outcome: Literal["compensation_finished"] = "compensation_finished"
    process_state: str


class WriteFailed(ResultModel):
    """Not an activity's result: what the workflow sees when a write still raised after its retries (the
    store was unavailable). Like :class:`Fenced` it ends the attempt; the record keeps its completeBy
    and the supervisor recovers it.

    Attributes:
        reason: The activity's failure, short.
    """

    outcome: Literal["write_failed"] = "write_failed"
    reason: str


StartStepResult: TypeAlias = Annotated[
    StepStarted
    | AwaitingReview
    | AwaitingDependency
    | ReviewRejected
    | BudgetExhausted
    | Stopped
    | Fenced
    | ReacquiringHold
    | HoldExpired,
    Field(discriminator="outcome"),
]
""":data:`~orderflow.contracts.START_STEP`'s result."""

RecordReviewResult: TypeAlias = Annotated[ReviewRecorded | Fenced, Field(discriminator="outcome")]
""":data:`~orderflow.contracts.RECORD_REVIEW`'s result."""

FinishOrderResult: TypeAlias = Annotated[OrderFinished | Stopped | Fenced, Field(discriminator="outcome")]
""":data:`~orderflow.contracts.FINISH_ORDER`'s result: :class:`Stopped` when the client cancelled while the
last step ran (it is undone with the others)."""

RecordStepFailureResult: TypeAlias = Annotated[FailureRecorded | Fenced, Field(discriminator="outcome")]
""":data:`~orderflow.contracts.RECORD_STEP_FAILURE`'s result."""

BeginCompensationResult: TypeAlias = Annotated[
    CompensationBegun | PastPointOfNoReturn | Fenced, Field(discriminator="outcome")
]
""":data:`~orderflow.contracts.BEGIN_COMPENSATION`'s result."""

StartUndoResult: TypeAlias = Annotated[UndoStarted | Fenced, Field(discriminator="outcome")]
""":data:`~orderflow.contracts.START_UNDO`'s result."""

FinishCompensationResult: TypeAlias = Annotated[CompensationFinished | Fenced, Field(discriminator="outcome")]
""":data:`~orderflow.contracts.FINISH_COMPENSATION`'s result."""
