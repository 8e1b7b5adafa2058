"""Settings refuse values that would only fail later, in every loop: NaN, infinity, non-positive
durations and counts, durations beyond a timedelta, a Cosmos DB key that is not base64."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orderflow.settings import MAX_DURATION_S, Settings

pytestmark = pytest.mark.unit

EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("STEP_TIMEOUT_S", "nan", "finite number"),
        ("STEP_TIMEOUT_S", "inf", "finite number"),
        ("STEP_TIMEOUT_S", "0", "greater than 0"),
        ("STEP_TIMEOUT_S", "-1", "greater than 0"),
        ("STEP_TIMEOUT_S", "1e308", "at most 315360000 seconds"),
        ("CLAIM_TIMEOUT_S", "0", "greater than 0"),
        ("START_LATENCY_S", "-0.5", "greater than or equal to 0"),
        ("COMPENSATION_LOG_RETENTION_S", str(MAX_DURATION_S * 2), "at most"),
        ("POLL_INTERVAL_S", "0", "greater than 0"),
        ("SUPERVISOR_BACKOFF_MAX_S", "-1", "greater than or equal to 0"),
        ("RETRY_BUDGET", "0", "greater than or equal to 1"),
        ("MAX_IN_FLIGHT_PER_HOST", "0", "greater than or equal to 1"),
        ("STARTER_BATCH", "0", "greater than or equal to 1"),
        ("SUPERVISOR_MAX_FAILURES", "0", "greater than or equal to 1"),
        ("COSMOS_KEY", "garbage", "should be base64"),
    ],
)
def test_a_value_that_would_fail_later_is_refused_naming_the_setting(
    name: str, value: str, problem: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings.load({name: value})
    (error,) = refused.value.errors()
    assert error["loc"] == (name,)
    assert problem in error["msg"]
    if name == "COSMOS_KEY":
        assert value not in str(refused.value.errors(include_input=False))  # a secret is never echoed


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("START_LATENCY_S", "0", 0.0),  # no allowance: the first step's deadline counts from the claim
        ("COMPENSATION_LOG_RETENTION_S", "0", 0.0),  # 0 never purges
        ("STEP_TIMEOUT_S", str(MAX_DURATION_S), MAX_DURATION_S),
        ("COSMOS_KEY", EMULATOR_KEY, EMULATOR_KEY),
        ("COSMOS_KEY", "", ""),  # empty on Azure: managed identity
    ],
)
def test_edge_values_that_mean_something_are_kept(name: str, value: str, expected: object) -> None:
    assert getattr(Settings.load({name: value}), name) == expected
