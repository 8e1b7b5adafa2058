"""The devhost's orchestrator function (devhost.durabletask_adapter.durabletask_orchestrator) tells the
end of an orchestration once, in its last episode, whether the workflow returns or raises; the real
runtime's episodes are in tests/integration/test_durabletask_backend.py."""

from __future__ import annotations

from collections.abc import Generator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from durabletask import task as dt

from devhost.durabletask_adapter import durabletask_orchestrator
from orchestrators.context import WorkflowContext

pytestmark = pytest.mark.unit

CTX = cast(dt.OrchestrationContext, SimpleNamespace(instance_id="a:o-1:1"))


def failing_workflow(_ctx: WorkflowContext, _payload: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    yield "a task"
    raise ValueError("the workflow failed")


def test_an_episode_that_ends_waiting_tells_no_end() -> None:
    ended: list[str] = []
    episode = durabletask_orchestrator(failing_workflow, ended.append)(CTX, {})

    assert next(episode) == "a task"
    episode.close()  # the runtime drops the generator of an episode that waits

    assert ended == []


def test_the_end_of_an_orchestration_whose_workflow_raises_is_told_too() -> None:
    # A failed orchestration has ended as surely as one that returned: its room is free.
    ended: list[str] = []
    episode = durabletask_orchestrator(failing_workflow, ended.append)(CTX, {})
    next(episode)

    with pytest.raises(ValueError, match="the workflow failed"):
        episode.send("its result")

    assert ended == ["a:o-1:1"]
