"""The custom-status format: what the workflow writes, the listener reads back."""

from __future__ import annotations

import pytest

from orderflow import custom_status
from orderflow.custom_status import AwaitingReview, Compensating, Other, Waiting, parse

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (custom_status.waiting("reserve_inventory"), Waiting(("reserve_inventory",))),
        (custom_status.waiting("a:undo", "b:undo"), Waiting(("a:undo", "b:undo"))),
        (custom_status.awaiting_review("charge_payment"), AwaitingReview("charge_payment")),
        (custom_status.COMPENSATING, Compensating()),
    ],
)
def test_every_status_the_workflow_writes_reads_back(written: str, read: object) -> None:
    assert parse(written) == read


@pytest.mark.parametrize("status", [None, "", "waiting:", "review:", "Running", "compensating!"])
def test_anything_else_is_other(status: str | None) -> None:
    assert parse(status) == Other()


@pytest.mark.parametrize("steps", [(), ("",), ("a,b",)])
def test_a_waiting_status_that_would_not_read_back_is_refused(steps: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="cannot write a waiting status"):
        custom_status.waiting(*steps)
