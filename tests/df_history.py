"""A builder of Durable Functions orchestration histories, to replay orchestrators without a host.

Modelled on the ``ContextBuilder`` of the SDK's own tests (Azure/azure-functions-durable-python,
``tests/test_utils/ContextBuilder.py`` and ``tests/test_utils/json_utils.py``): the same event fields
(``EventType``, ``EventId``, ``IsPlayed``, ``Timestamp`` plus ``Name``, ``Version``, ``Input``,
``Result``, ``Reason``, ``Details``, ``TaskScheduledId``, ``FireAt``, ``TimerId``), serialised the same
way, so ``DurableOrchestrationContext.from_json`` reads them exactly as it reads the extension's payload.

Unlike the SDK's builder, time is explicit (each episode starts at a given time, which becomes the
orchestration's ``current_utc_datetime``) and ``IsPlayed`` is derived: events of earlier episodes are
played, events of the last episode are new. The context JSON carries the replay-schema fields the
current extension sends (``upperSchemaVersion``, ``upperSchemaVersionNew``, timer durations).

Example::

    context_json = (
        HistoryBuilder("a:o-1:1", T0)
        .started({"orderId": "a:o-1"})
        .task_scheduled("start_step", 0)
        .episode(T0 + timedelta(seconds=1))
        .task_completed(0, {"outcome": "started", "completeBy": "2025-01-02T03:04:36Z", "remainingCalls": 9})
        .build_context_json()
    )
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self

from azure.durable_functions.constants import DATETIME_STRING_FORMAT
from azure.durable_functions.models.history.HistoryEventType import HistoryEventType


def df_timestamp(at: datetime) -> str:
    """``at`` in the SDK's wire format, ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC).

    Raises:
        ValueError: ``at`` is naive (histories are always UTC; say so explicitly).
    """
    if at.tzinfo is None:
        raise ValueError("history timestamps must be timezone-aware")
    return at.astimezone(UTC).strftime(DATETIME_STRING_FORMAT)


@dataclass
class _Event:
    event_type: HistoryEventType
    timestamp: datetime
    event_id: int = -1
    fields: dict[str, Any] = field(default_factory=dict)


class HistoryBuilder:
    """Builds one orchestration's history, episode by episode, and the context JSON the SDK replays.

    Every method except :meth:`episodes`, :meth:`build` and :meth:`build_context_json` appends events and
    returns the builder (events are recorded in call order, the way the task hub records them: an
    episode's new events first, then the ``TaskScheduled`` / ``TimerCreated`` of its decisions).

    An episode is ``OrchestratorStarted`` .. ``OrchestratorCompleted``; :meth:`started` opens the first
    one and :meth:`episode` closes the current one and opens the next. The last episode is left open: its
    events are the new ones the orchestrator is about to see.

    Args:
        instance_id: The orchestration instance id.
        start_time: Aware UTC time of the first ``OrchestratorStarted`` (the orchestration's first
            ``current_utc_datetime``).
        upper_schema_version: ``upperSchemaVersion`` sent by the extension (1 = replay schema V2; 0 or
            None for the legacy V1 action shape).
        upper_schema_version_new: ``upperSchemaVersionNew`` (2 = V3, long timers), or None to omit.
        maximum_short_timer_duration: .NET ``TimeSpan`` text, or None to omit (then no long timers).
        long_running_timer_interval_duration: .NET ``TimeSpan`` text, or None to omit.
    """

    def __init__(
        self,
        instance_id: str,
        start_time: datetime,
        *,
        upper_schema_version: int | None = 1,
        upper_schema_version_new: int | None = 2,
        maximum_short_timer_duration: str | None = "6.00:00:00",
        long_running_timer_interval_duration: str | None = "3.00:00:00",
    ) -> None:
        if start_time.tzinfo is None:
            raise ValueError("start_time must be timezone-aware")
        self.instance_id = instance_id
        self._now = start_time
        self._events: list[_Event] = []
        self._input: str | None = None
        self._schema: dict[str, Any] = {
            key: value
            for key, value in (
                ("upperSchemaVersion", upper_schema_version),
                ("upperSchemaVersionNew", upper_schema_version_new),
                ("maximumShortTimerDuration", maximum_short_timer_duration),
                ("longRunningTimerIntervalDuration", long_running_timer_interval_duration),
            )
            if value is not None
        }

    def _add(self, event_type: HistoryEventType, event_id: int = -1, **fields: Any) -> Self:
        self._events.append(_Event(event_type, self._now, event_id, fields))
        return self

    def started(self, orchestration_input: Any, *, name: str = "orchestrator", version: str = "") -> Self:
        """Open the first episode: ``OrchestratorStarted`` then ``ExecutionStarted``.

        Args:
            orchestration_input: The JSON-able input; stored JSON-encoded, as the extension sends it.
            name: The orchestrator function name.
            version: ``Version`` of ``ExecutionStarted`` (required by the SDK; empty by default).

        Raises:
            ValueError: called twice.
        """
        if self._events:
            raise ValueError("started() opens the history and can be called once")
        self._input = json.dumps(orchestration_input)
        self._add(HistoryEventType.ORCHESTRATOR_STARTED)
        return self._add(
            HistoryEventType.EXECUTION_STARTED,
            Name=name,
            Version=version,
            Input=self._input,
            OrchestrationInstance={"InstanceId": self.instance_id, "ExecutionId": f"{self.instance_id}-x"},
        )

    def episode(self, at: datetime) -> Self:
        """Close the current episode and open the next at ``at`` (its ``current_utc_datetime``).

        Raises:
            ValueError: ``at`` is naive or earlier than the previous event.
        """
        if at.tzinfo is None or at < self._now:
            raise ValueError("episodes start at aware times that never go back")
        self._add(HistoryEventType.ORCHESTRATOR_COMPLETED)
        self._now = at
        return self._add(HistoryEventType.ORCHESTRATOR_STARTED)

    def task_scheduled(self, name: str, event_id: int) -> Self:
        """``TaskScheduled`` of activity ``name`` with the SDK's task sequence number ``event_id``."""
        return self._add(HistoryEventType.TASK_SCHEDULED, event_id, Name=name, Version="")

    def task_completed(self, task_id: int, result: Any) -> Self:
        """``TaskCompleted`` of task ``task_id``; ``result`` is stored JSON-encoded."""
        return self._add(HistoryEventType.TASK_COMPLETED, TaskScheduledId=task_id, Result=json.dumps(result))

    def task_failed(self, task_id: int, reason: str, details: str) -> Self:
        """``TaskFailed`` of task ``task_id`` (the activity raised)."""
        return self._add(
            HistoryEventType.TASK_FAILED, TaskScheduledId=task_id, Reason=reason, Details=details
        )

    def timer_created(self, event_id: int, fire_at: datetime) -> Self:
        """``TimerCreated`` with the timer's sequence number ``event_id``, firing at ``fire_at``."""
        return self._add(HistoryEventType.TIMER_CREATED, event_id, FireAt=df_timestamp(fire_at))

    def timer_fired(self, timer_id: int, fire_at: datetime) -> Self:
        """``TimerFired`` of timer ``timer_id``."""
        return self._add(HistoryEventType.TIMER_FIRED, TimerId=timer_id, FireAt=df_timestamp(fire_at))

    def event_raised(self, name: str, payload: Any) -> Self:
        """``EventRaised`` named ``name``; ``payload`` is stored JSON-encoded in ``Input``."""
        return self._add(HistoryEventType.EVENT_RAISED, Name=name, Input=json.dumps(payload))

    def episodes(self) -> list[HistoryBuilder]:
        """The history as the extension sent it at each episode: one builder per ``OrchestratorStarted``.

        The k-th builder holds every event up to (not including) the ``OrchestratorCompleted`` that ends
        episode k, so replaying them in order reproduces the orchestration's life episode by episode. (The
        extension would not yet include the ``TaskScheduled`` / ``TimerCreated`` recording episode k's
        own decisions; the SDK does not read those events, so they are left in.)
        """
        starts = [
            i for i, e in enumerate(self._events) if e.event_type is HistoryEventType.ORCHESTRATOR_STARTED
        ]
        ends = [start - 1 for start in starts[1:]] + [len(self._events)]
        prefixes: list[HistoryBuilder] = []
        for end in ends:
            prefix = copy.copy(self)
            prefix._events = list(self._events[:end])
            prefixes.append(prefix)
        return prefixes

    def build(self) -> list[dict[str, Any]]:
        """The history as the extension sends it: a list of event objects.

        ``IsPlayed`` is true for every event before the last ``OrchestratorStarted`` (earlier episodes).

        Raises:
            ValueError: :meth:`started` was not called.
        """
        if not self._events:
            raise ValueError("call started() first")
        last_start = max(
            i for i, e in enumerate(self._events) if e.event_type is HistoryEventType.ORCHESTRATOR_STARTED
        )
        return [
            {
                "EventType": int(event.event_type),
                "EventId": event.event_id,
                "IsPlayed": index < last_start,
                "Timestamp": df_timestamp(event.timestamp),
                **event.fields,
            }
            for index, event in enumerate(self._events)
        ]

    def build_context_json(self) -> str:
        """The orchestration trigger payload: ``DurableOrchestrationContext.from_json`` reads it.

        Raises:
            ValueError: :meth:`started` was not called.
        """
        history = self.build()
        return json.dumps(
            {
                "history": history,
                "instanceId": self.instance_id,
                "isReplaying": any(e["IsPlayed"] for e in history),
                "parentInstanceId": None,
                "input": self._input,
                **self._schema,
            }
        )
