"""A scripted durable runtime: the real order workflow, advanced one task at a time by a test.

A durable runtime (durabletask locally, Durable Functions on Azure) runs an orchestration's generator
until it waits, runs what it waits on, and resumes it when a task completes. Here the test decides when
each task completes: when the activity an orchestration waits on runs, when a raised event arrives and
when a durable timer fires. The workflow body is the real one (:func:`orchestrators.workflow.order_workflow`),
so every activity payload is the one the real orchestration builds; the test calls the activity with it
and hands the result back.

Events follow the runtimes' rules: an event raised before anyone waits for it is buffered and completes
the first wait of that name; a ``when_any`` completes with the task that completed first. A timer fires
only when the test says so, which may be well after its time: a late timer lets an answer that arrived
after the deadline win the race, as a delayed timer message does on a real task hub.
"""

from __future__ import annotations

import itertools
from collections import defaultdict, deque
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from orchestrators.context import ActivityFailed, ActivityRetry
from orchestrators.workflow import order_workflow
from orderflow.clock import Clock
from orderflow.contracts import ORDER_WORKFLOW
from orderflow.orchestration import InstanceStatus


class Task:
    """A task the workflow created: ``done`` with ``result`` once completed (``order`` says when)."""

    def __init__(self) -> None:
        self.done = False
        self.result: Any = None
        self.order = -1


class ActivityTask(Task):
    """An activity call: its registered name and JSON payload; ``failed_tries`` counts runs that raised."""

    def __init__(self, name: str, payload: dict[str, Any], retry: ActivityRetry | None) -> None:
        super().__init__()
        self.name = name
        self.payload = payload
        self.max_tries = retry.max_attempts if retry is not None else 1
        self.failed_tries = 0


class TimerTask(Task):
    """A durable timer due at ``fire_at`` (UTC)."""

    def __init__(self, fire_at: datetime) -> None:
        super().__init__()
        self.fire_at = fire_at
        self.cancelled = False


class EventTask(Task):
    """A wait for the external event ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class AnyTask(Task):
    """``when_any``: completes with the first of ``tasks`` to complete."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        super().__init__()
        self.tasks = tuple(tasks)


class ScriptedOrchestration:
    """One orchestration instance running :func:`order_workflow`; it is its own workflow context.

    Attributes:
        custom_status: What the workflow last published (the response listener reads it).
        output: The workflow's return value once it ended, else None.
        waiting_on: The task the workflow waits on (None once it ended).
    """

    def __init__(self, instance_id: str, payload: dict[str, Any], clock: Clock) -> None:
        self._instance_id = instance_id
        self._clock = clock
        self.custom_status: str | None = None
        self.output: dict[str, Any] | None = None
        self.waiting_on: Task | None = None
        self._buffered: defaultdict[str, deque[Any]] = defaultdict(deque)
        self._open_waits: list[EventTask] = []
        self._completions = itertools.count()
        self._body = order_workflow(self, payload)
        self._resume(None)

    def __repr__(self) -> str:
        return f"<orchestration {self._instance_id}>"

    # The workflow context (orchestrators.context.WorkflowContext).

    @property
    def instance_id(self) -> str:
        """``{orderId}:{attempt}``."""
        return self._instance_id

    @property
    def current_utc_datetime(self) -> datetime:
        """The fake clock's time when the workflow runs."""
        return self._clock.now()

    @property
    def is_replaying(self) -> bool:
        """Never: each line of the body runs once."""
        return False

    def set_custom_status(self, status: str) -> None:
        """Publish ``status`` (the listener delivers answers only for the steps named in it)."""
        self.custom_status = status

    def call_activity(
        self, name: str, payload: dict[str, Any], *, retry: ActivityRetry | None = None
    ) -> ActivityTask:
        """Schedule an activity; the test runs it."""
        return ActivityTask(name, payload, retry)

    def create_timer(self, fire_at: datetime) -> TimerTask:
        """A timer; the test fires it once the clock reached ``fire_at``."""
        return TimerTask(fire_at)

    def wait_for_external_event(self, name: str) -> EventTask:
        """A wait, completed at once by an event of that name raised earlier and still buffered."""
        task = EventTask(name)
        if self._buffered[name]:
            self._complete(task, self._buffered[name].popleft())
        else:
            self._open_waits.append(task)
        return task

    def when_any(self, tasks: Sequence[Task]) -> AnyTask:
        """The first of ``tasks`` to complete."""
        return AnyTask(tasks)

    def cancel_timer(self, timer: Task) -> None:
        """Cancel a timer that lost its race: it never fires."""
        assert isinstance(timer, TimerTask)
        timer.cancelled = True

    def task_result(self, task: Task) -> Any:
        """The result of a completed task."""
        return task.result

    # What the test drives.

    @property
    def running(self) -> bool:
        """The workflow has not returned yet."""
        return self.output is None

    @property
    def activity(self) -> ActivityTask | None:
        """The activity the workflow waits on, if it waits on one."""
        return self.waiting_on if isinstance(self.waiting_on, ActivityTask) else None

    def due_timer(self) -> TimerTask | None:
        """A timer the workflow waits on whose time has come (the clock passed ``fire_at``)."""
        waiting = self.waiting_on
        tasks = waiting.tasks if isinstance(waiting, AnyTask) else (waiting,) if waiting else ()
        now = self._clock.now()
        timers = [task for task in tasks if isinstance(task, TimerTask)]
        return next((t for t in timers if not (t.done or t.cancelled) and t.fire_at <= now), None)

    def complete_activity(self, result: dict[str, Any]) -> None:
        """The activity returned ``result``: the workflow goes on to its next task."""
        task = self.activity
        assert task is not None
        self._complete(task, result)
        self._resume(result)

    def activity_raised(self, error: Exception) -> None:
        """The activity raised: the runtime retries it until its retry policy is spent, then the
        workflow sees :class:`ActivityFailed`."""
        task = self.activity
        assert task is not None
        task.failed_tries += 1
        if task.failed_tries >= task.max_tries:
            self._resume(None, ActivityFailed(f"{task.name} failed: {error}"))

    def fire_timer(self) -> None:
        """Fire the due timer the workflow waits on."""
        timer = self.due_timer()
        assert timer is not None
        self._complete(timer, None)
        self._wake()

    def raise_event(self, name: str, payload: Any) -> None:
        """Deliver an external event: it completes the oldest open wait of that name, or is buffered."""
        for task in self._open_waits:
            if task.name == name:
                self._open_waits.remove(task)
                self._complete(task, payload)
                self._wake()
                return
        self._buffered[name].append(payload)

    def _complete(self, task: Task, result: Any) -> None:
        task.done, task.result, task.order = True, result, next(self._completions)

    def _wake(self) -> None:
        """Resume the workflow if what it waits on has completed."""
        waiting = self.waiting_on
        if isinstance(waiting, AnyTask):
            done = [task for task in waiting.tasks if task.done]
            if done:
                self._resume(min(done, key=lambda task: task.order))
        elif isinstance(waiting, TimerTask | EventTask) and waiting.done:
            self._resume(waiting.result)

    def _resume(self, value: Any, error: Exception | None = None) -> None:
        try:
            task = self._body.throw(error) if error is not None else self._body.send(value)
        except StopIteration as stop:
            self.output, self.waiting_on = stop.value, None
            return
        self.waiting_on = task
        self._wake()  # an event raised before the wait completes it at once


class ScriptedClient:
    """The durable client of one host (:class:`orderflow.orchestration.OrchestrationClient`).

    Attributes:
        instances: Every instance started through this client, by instance id, in start order.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.instances: dict[str, ScriptedOrchestration] = {}

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        """Start an instance; one that exists already is left alone (False)."""
        assert name == ORDER_WORKFLOW
        if instance_id in self.instances:
            return False
        self.instances[instance_id] = ScriptedOrchestration(instance_id, payload, self._clock)
        return True

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        """Running or not, and the custom status; None for an instance this host never started."""
        instance = self.instances.get(instance_id)
        if instance is None:
            return None
        return InstanceStatus(running=instance.running, custom_status=instance.custom_status)

    def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
        """Raise ``name`` on a running instance (the workflow resumes if it waits on it)."""
        self.instances[instance_id].raise_event(name, payload)
