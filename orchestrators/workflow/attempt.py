"""One attempt's context and the outcomes that end a step: what the other workflow modules share."""

from __future__ import annotations

import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from orchestrators.context import ActivityFailed, ActivityRetry, WorkflowContext, WorkflowTask
from orderflow import custom_status
from orderflow.compensation_trigger import CANCELLED_KIND, Seen, compensation_cause
from orderflow.contracts import (
    RECORD_STEP_FAILURE_ACTIVITY,
    ActivityContract,
    ContractModel,
    FinishCompensationInput,
    FinishOrderInput,
    OrchestrationInput,
    Outcome,
    RecordStepFailureInput,
    StepError,
    StepResult,
    UndoResult,
)
from orderflow.errors import ErrorKind
from orderflow.messages import AgentResponse
from orderflow.records import instance_id_for
from orderflow.results import StepStarted, WriteFailed
from orderflow.workflows import WorkflowDefinition

ResultT = TypeVar("ResultT")

logger = logging.getLogger(__name__)

STATE_WRITE_RETRY = ActivityRetry(first_interval_s=1.0, max_attempts=4, backoff=2.0, max_interval_s=4.0)
"""Retries of a state write that raised (store unavailable). Small: past them the record simply stays
``Processing`` and the supervisor recovers it, which is the slow path, not a loss."""


def step_error(step: str, response: AgentResponse) -> StepError:
    """A failed answer as the error recorded for ``step`` (short: it lives in history)."""
    return StepError(
        step=step,
        kind=response.error_kind or ErrorKind.TRANSIENT.value,
        code=response.error_code,
        message=(response.error_message or "agent reported a failure")[:500],
        calls=response.calls,
    )


@dataclass(frozen=True)
class Ended:
    """The attempt ends here with this summary (the workflow's return value)."""

    outcome: str
    step: str | None = None

    def summary(self) -> dict[str, Any]:
        """The workflow's return value: ``{"outcome": ..., "step": ...}``."""
        return {"outcome": self.outcome, "step": self.step}


@dataclass(frozen=True)
class Compensate:
    """Forward progress stopped: undo what was done, recording ``cause``."""

    cause: StepError


class Attempt:
    """One attempt's context: its input, definition and instance id, with the calls it makes."""

    def __init__(
        self, ctx: WorkflowContext, start: OrchestrationInput, definition: WorkflowDefinition
    ) -> None:
        self.ctx = ctx
        self.start = start
        self.definition = definition
        self.instance_id = instance_id_for(start.order_id, start.attempt)
        self.log = _ReplaySafeLog(ctx, start.order_id, self.instance_id)
        self.step: str | None = None
        """The forward step the attempt runs (None before the first, and in an undo)."""
        self._claimed = start.first_step

    def started_by_claim(self, step: str) -> StepStarted | None:
        """The start of ``step`` when the claim started it and the starter sent its request
        (:attr:`OrchestrationInput.first_step`), once: the attempt then only waits for the answer.
        The status says ``waiting`` as it does before the activity would run. An answer that came back
        before this first episode is held back by the listener until the status says so on Azure, and is
        buffered until the wait by durabletask locally (docs/design.md §7)."""
        claimed, self._claimed = self._claimed, None
        if claimed is None or claimed.step != step:
            return None
        self.ctx.set_custom_status(custom_status.waiting(step))
        return StepStarted(complete_by=claimed.complete_by)

    def call(
        self, activity: ActivityContract[Any, ResultT], data: ContractModel
    ) -> Generator[WorkflowTask, Any, ResultT | WriteFailed]:
        """Call a fenced-write activity; a write that still raises after its retries is
        :class:`WriteFailed`, which ends the attempt: the record keeps its ``completeBy`` and the
        supervisor recovers it."""
        try:
            raw = yield self.ctx.call_activity(activity.name, data.to_payload(), retry=STATE_WRITE_RETRY)
        except ActivityFailed as exc:
            return WriteFailed(reason=f"activity failed: {str(exc)[:200]}")
        return activity.read_result(raw)

    def compensate_for(
        self, step: str, seen: Seen, *, fallback_left: bool = False, correctable: bool = False
    ) -> Compensate | None:
        """Compensation for what was seen at ``step`` (a refusal to go on, or the step's error), or None
        when it is no reason to compensate (:func:`compensation_cause`, applied once here)."""
        cause = compensation_cause(step, seen, fallback_left=fallback_left, correctable=correctable)
        if cause is None:
            return None
        if cause.kind == CANCELLED_KIND:
            # The client (or an operator) stopped the order: start nothing more, undo what was done.
            self.log.note("order.cancel", step, None)
        else:
            self.log.note("order.compensate", step, cause.code)
        return Compensate(cause)

    def record_failure(self, error: StepError) -> Generator[WorkflowTask, Any, None]:
        """Hand the order to the supervisor now: :data:`RECORD_STEP_FAILURE` sets ``completeBy`` to now."""
        failure = RecordStepFailureInput(
            order_id=self.start.order_id,
            instance_id=self.instance_id,
            error=error,
            at=self.ctx.current_utc_datetime,
        )
        yield from self.call(RECORD_STEP_FAILURE_ACTIVITY, failure)

    def finish_input(self, outcome: Outcome, completed: StepResult | None) -> FinishOrderInput:
        """:data:`FINISH_ORDER`'s input for this attempt."""
        return FinishOrderInput(
            order_id=self.start.order_id,
            instance_id=self.instance_id,
            workflow_version=self.start.workflow_version,
            outcome=outcome,
            completed=completed,
        )

    def finish_compensation_input(
        self,
        undone: tuple[UndoResult, ...],
        *,
        failed: StepError | None = None,
        also_failed: tuple[StepError, ...] = (),
    ) -> FinishCompensationInput:
        """:data:`FINISH_COMPENSATION`'s input for this attempt."""
        return FinishCompensationInput(
            order_id=self.start.order_id,
            instance_id=self.instance_id,
            workflow_version=self.definition.version,
            undone=undone,
            failed=failed,
            also_failed=also_failed,
        )


class _ReplaySafeLog:
    """Logs workflow events only when not replaying, with the correlation ids as fields."""

    def __init__(self, ctx: WorkflowContext, order_id: str, instance_id: str) -> None:
        self._ctx = ctx
        self._order_id = order_id
        self._instance_id = instance_id

    def note(self, event: str, step: str | None, detail: Any) -> None:
        if not self._ctx.is_replaying:
            logger.info(
                "%s order_id=%s instance_id=%s step=%s detail=%s",
                event,
                self._order_id,
                self._instance_id,
                step,
                detail,
            )
