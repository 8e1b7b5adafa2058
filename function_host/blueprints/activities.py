"""Azure Functions triggers of the activities role: the orchestration's activities, registered by
walking the role's table (``activities.table.ACTIVITIES``). Each trigger hands its JSON input to the
table entry, which validates it, calls the plain role function and returns its result as JSON."""

from __future__ import annotations

import typing
from typing import Any

import azure.durable_functions as df

from activities.table import ACTIVITIES, Activity
from function_host.wiring import dependencies

ActivityPayload = typing.Dict[str, Any]  # noqa: UP006
"""An activity's JSON input or output, as the Durable extension passes it and the worker decodes it.

A ``typing`` generic on purpose: the Python worker refuses a ``dict[str, Any]`` annotation on a binding
(a ``types.GenericAlias`` is neither a class nor a ``typing`` generic to its check: "invalid non-type
annotation") and the host then loads no function of the app at all.
"""

bp = df.Blueprint()


def _register(activity: Activity[Any, Any]) -> None:
    """Register ``activity`` as a Durable Functions activity trigger under its contract's name."""

    def run(payload: ActivityPayload) -> ActivityPayload:
        return activity.run(payload, dependencies())

    run.__name__ = run.__qualname__ = f"{activity.name}_activity"
    run.__doc__ = activity.summary
    bp.function_name(activity.name)(bp.activity_trigger(input_name="payload")(run))


for _activity in ACTIVITIES:
    _register(_activity)
