"""What every settings section shares: the frozen pydantic base, the duration bound, the cross-section
timeout bounds, the one-line description of an invalid setting, and whether this is Azure."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

MAX_DURATION_S = 315_360_000.0
"""Longest duration any ``*_S`` setting may have: ten years, far within what a ``timedelta`` holds."""

AZURE_PLATFORM_VARIABLES = ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME")
"""Variables the App Service / Functions platform sets on every instance and Core Tools never sets.

``WEBSITE_INSTANCE_ID`` is what the Functions host itself tests for App Service; Linux Consumption
instances have none, but every plan sets ``WEBSITE_SITE_NAME`` (the app's name). ``func start`` sets
``WEBSITE_HOSTNAME`` (``localhost:7071``) and ``AZURE_FUNCTIONS_ENVIRONMENT``, so neither is a sign.
"""


def on_azure(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs on the App Service / Functions platform (default: ``os.environ``)."""
    source = os.environ if environ is None else environ
    return any(source.get(name, "").strip() for name in AZURE_PLATFORM_VARIABLES)


class Section(BaseModel):
    """One group of settings, read by the roles that need it. Field names are the environment variables
    they are read from; durations are seconds."""

    # NaN and infinity are never a duration or a count: they would fail later, in every loop.
    # Inputs stay out of error texts: a mistyped key must not reach a log.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, hide_input_in_errors=True)

    @field_validator("*")
    @classmethod
    def _durations_fit_a_timedelta(cls, value: Any, info: ValidationInfo) -> Any:
        # 1e308 seconds passes every lower bound, then overflows the first deadline computed from it.
        is_duration = bool(info.field_name and info.field_name.endswith("_S"))
        if is_duration and isinstance(value, float | int) and value > MAX_DURATION_S:
            raise ValueError(f"should be at most {MAX_DURATION_S:.0f} seconds (ten years)")
        return value


_SECRET_SETTINGS = ("KEY", "CONNECTION_STRING", "SECRET", "PASSWORD")
"""Parts of setting names whose values are never printed (and ``SERVICEBUS``, a connection string)."""

_EXPECTED = {
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "float_parsing": "a number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "string_type": "text",
}
"""What a setting should be, by pydantic error type, in words."""


class TimeoutBound(NamedTuple):
    """A remote call's timeout setting and the deadline it must end within.

    Attributes:
        timeout: The timeout setting's name.
        deadline: The deadline setting's name.
        fraction: Share of the deadline the timeout must stay below (a lock renewal has half a lock).
        strict: Whether the timeout must be shorter (True) or may equal the bound (False).
        why: Why, in a few words, for the refusal.
    """

    timeout: str
    deadline: str
    fraction: float
    strict: bool
    why: str


TIMEOUT_BOUNDS: tuple[TimeoutBound, ...] = (
    TimeoutBound(
        "STORE_CONNECTION_TIMEOUT_S", "STORE_OPERATION_TIMEOUT_S", 1.0, False, "a store operation includes it"
    ),
    TimeoutBound(
        "STORE_READ_TIMEOUT_S", "STORE_OPERATION_TIMEOUT_S", 1.0, False, "a store operation includes it"
    ),
    TimeoutBound(
        "STORE_OPERATION_TIMEOUT_S",
        "STEP_TIMEOUT_S",
        1.0,
        True,
        "a step's store writes end within its deadline",
    ),
    TimeoutBound(
        "STORE_OPERATION_TIMEOUT_S",
        "CLAIM_TIMEOUT_S",
        1.0,
        True,
        "a claimed order's first write ends in time",
    ),
    TimeoutBound("STORE_OPERATION_TIMEOUT_S", "SCAN_MAX_S", 1.0, True, "a scan's page ends within the scan"),
    TimeoutBound("QUEUE_READ_TIMEOUT_S", "STEP_TIMEOUT_S", 1.0, True, "a step's request is sent within it"),
    TimeoutBound(
        "QUEUE_READ_TIMEOUT_S", "QUEUE_LOCK_S", 0.5, True, "a lock renewal sent at half-lock returns in time"
    ),
    TimeoutBound(
        "OPERATOR_JWKS_TIMEOUT_S", "OPERATOR_API_TIMEOUT_S", 1.0, True, "the caller hears the answer"
    ),
)
"""Every remote-call timeout checked against the deadline of the role that makes the call (at start-up,
by :meth:`orderflow.settings.Settings.load`). An agent's HTTP call needs no entry: each is capped by the
time left to its step's deadline when it starts (``AGENT_CALL_TIMEOUT_S``)."""


def timeout_refusals(values: Mapping[str, float]) -> Iterator[str]:
    """Why each timeout in ``values`` that breaks a :data:`TIMEOUT_BOUNDS` entry is refused, one line each,
    e.g. ``STORE_OPERATION_TIMEOUT_S (2.5 s) must be shorter than STEP_TIMEOUT_S (1.5 s): ...``."""
    for bound in TIMEOUT_BOUNDS:
        timeout, deadline = values[bound.timeout], values[bound.deadline] * bound.fraction
        if timeout < deadline or (not bound.strict and timeout == deadline):
            continue
        share = "half of " if bound.fraction == 0.5 else ""
        relation = "shorter than" if bound.strict else "at most"
        yield (
            f"{bound.timeout} ({timeout:g} s) must be {relation} {share}{bound.deadline} "
            f"({values[bound.deadline]:g} s): {bound.why}"
        )


def describe_invalid_settings(exc: ValidationError) -> str:
    """One line about the first invalid setting in ``exc``: its name, its value (unless secret) and what
    it should be, e.g. ``STEP_TIMEOUT_S='abc' is not valid: it should be a number of seconds``."""
    problems = exc.errors()
    first = problems[0]
    if not first["loc"]:
        # A check across settings (TIMEOUT_BOUNDS): its message names them, with values that are no secret.
        return str(first["msg"]).removeprefix("Value error, ")
    name = str(first["loc"][0])
    if name == "SERVICEBUS" or any(part in name for part in _SECRET_SETTINGS):
        shown = f"{name} (value not shown)"
    else:
        shown = f"{name}={' '.join(repr(first['input']).split())[:80]}"
    expected = _EXPECTED.get(first["type"])
    if expected is not None:
        if expected.endswith("number") and name.endswith("_S"):
            expected += " of seconds"  # every *_S setting is a duration in seconds
        problem = f"it should be {expected}"
    else:  # "Input should be greater than or equal to 0", "String should match pattern ..."
        message = (
            str(first["msg"]).removeprefix("Value error, ").removeprefix("Input ").removeprefix("String ")
        )
        problem = f"it {message}" if message.startswith("should") else message
    others = len(problems) - 1
    more = f" (and {others} more invalid setting{'s' if others > 1 else ''})" if others else ""
    return f"{shown} is not valid: {problem}{more}"
