"""The error-kind encoding: the ``[kind]`` marker ``OrderflowError`` writes and ``kind_of`` reads back."""

from __future__ import annotations

import pytest

from orderflow.errors import (
    ConcurrencyConflict,
    ErrorKind,
    NotFound,
    OrderflowError,
    PermanentError,
    TransientError,
    kind_of,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("error", [TransientError("x"), NotFound("x"), ConcurrencyConflict("x")])
def test_every_error_reads_back_as_its_kind(error: OrderflowError) -> None:
    assert kind_of(str(error)) is error.kind


def test_the_kind_survives_a_runtime_wrapping_the_text() -> None:
    assert (
        kind_of(f"Activity function 'start_step' failed: {TransientError('store down')}")
        is ErrorKind.TRANSIENT
    )


def test_the_first_marker_wins_over_one_quoted_from_a_remote_detail() -> None:
    # A refusal whose detail quotes a transient error from elsewhere is still a refusal.
    error = PermanentError("carrier_refused", f"the carrier said: {TransientError('busy')}")

    assert kind_of(str(error)) is ErrorKind.PERMANENT


@pytest.mark.parametrize("text", ["", "plain failure", "[unknown] kind", "[transient"])
def test_text_without_a_marker_has_no_kind(text: str) -> None:
    assert kind_of(text) is None
