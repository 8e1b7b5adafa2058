"""The orchestration activities as the runtime calls them: JSON in, JSON out, through the activities
table (``activities.table.ACTIVITIES``), so tests exercise the same boundary the hosts register."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.sections import ActivitySections
from activities.table import ACTIVITIES
from orderflow.contracts import (
    BEGIN_COMPENSATION,
    FINISH_COMPENSATION,
    FINISH_ORDER,
    RECORD_REVIEW,
    RECORD_STEP_FAILURE,
    START_STEP,
    START_UNDO,
)
from tests.host_deps import HostDeps

JsonActivity = Callable[[dict[str, Any], HostDeps], dict[str, Any]]


def json_activity(name: str) -> JsonActivity:
    """The activity registered as ``name``, called with a JSON payload; returns its JSON result."""
    (activity,) = [entry for entry in ACTIVITIES if entry.name == name]

    def call(payload: dict[str, Any], deps: HostDeps) -> dict[str, Any]:
        return activity.run(payload, deps, ActivitySections.of(deps.settings))

    call.__name__ = name
    return call


start_step = json_activity(START_STEP)
finish_order = json_activity(FINISH_ORDER)
record_step_failure = json_activity(RECORD_STEP_FAILURE)
record_review = json_activity(RECORD_REVIEW)
begin_compensation = json_activity(BEGIN_COMPENSATION)
start_undo = json_activity(START_UNDO)
finish_compensation = json_activity(FINISH_COMPENSATION)
