"""The ``TypedData`` the Functions host sends the worker for a timer trigger and an activity trigger.

- A timer trigger's value is the host's ``TimerInfo`` serialised by Json.NET (``Schedule``,
  ``ScheduleStatus``, ``IsPastDue``): an object, so the host sends it as ``TypedData.json``; the worker's
  ``TimerRequestConverter`` accepts nothing else.
- An activity trigger's value is the activity input as a JSON string: the extension binds an out-of-process
  activity's input to ``System.String`` (the input's JSON text), which the host sends as ``TypedData.string``;
  the worker's ``ActivityTriggerConverter`` decodes it with the Durable codec.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from tests.worker.rpc import protos


def dotnet_time(at: datetime) -> str:
    """``at`` as Json.NET writes a ``DateTime`` with an offset (``2026-01-01T12:00:00+00:00``)."""
    return at.isoformat(timespec="seconds")


def timer_trigger(last: datetime, *, every: timedelta, past_due: bool = False) -> Any:
    """A timer trigger's data: it last fired at ``last`` and fires again ``every`` later."""
    return protos.TypedData(
        json=json.dumps(
            {
                "Schedule": {"AdjustForDST": True},
                "ScheduleStatus": {
                    "Last": dotnet_time(last),
                    "Next": dotnet_time(last + every),
                    "LastUpdated": dotnet_time(last),
                },
                "IsPastDue": past_due,
            }
        )
    )


def activity_trigger(input_text: str) -> Any:
    """An activity trigger's data: the input the orchestrator passed, as the JSON text its SDK wrote."""
    return protos.TypedData(string=input_text)
