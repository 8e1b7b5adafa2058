"""The order workflow body: one generator that runs any :class:`WorkflowDefinition`.

For each step not yet completed it starts the step through a fenced activity (which writes the step's
``completeBy`` and sends the agent request), then races a durable timer at that ``completeBy`` against the
agent's response event (Scheduler–Agent–Supervisor). The protocol rules it upholds (docs/design.md §3):

- every state write is an activity fenced on ``lockedBy``; a fenced-out write ends the instance;
- when the timer wins, the instance ends *without writing*: the record stays ``Processing`` with an
  expired ``completeBy`` and the supervisor recovers it, exactly as after a crash;
- the losing timer is cancelled so the instance completes at once;
- a response whose request id is not the one awaited cannot advance the step: the attempt waits for
  its deadline and is recovered like any timed-out attempt.

The body is split by path: :mod:`~orchestrators.workflow.run` (the entry point),
:mod:`~orchestrators.workflow.forward` (a step on its provider and fallback),
:mod:`~orchestrators.workflow.review` (a reviewer's decision, an operator's correction),
:mod:`~orchestrators.workflow.compensation` (the undo), :mod:`~orchestrators.workflow.responses` (the
timer's race against the answers) and :mod:`~orchestrators.workflow.attempt` (the attempt they share).
"""

from orchestrators.workflow.run import order_workflow

__all__ = ["order_workflow"]
