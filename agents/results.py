"""What an agent accepts as a service's result: bounded strings, and a hold no longer than asked.

A result that breaks these rules is a contract violation by the service: the agent answers a permanent
failure with code :data:`INVALID_RESULT` (docs/extending.md, "The answer"), so a response never grows too
large to send, and a hold's ``expiresAt`` can never disable the guard that refuses to commit on an
expired hold (:mod:`orderflow.protocol.holds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from orderflow.errors import PermanentError
from orderflow.protocol.holds import HOLD_EXPIRY_SKEW_S
from orderflow.records.times import parse_utc

INVALID_RESULT = "invalid_result"
"""Error code of a permanent failure whose cause is a result the service should not have given."""
MAX_RESULT_VALUE_CHARS = 256
"""Most characters of one kept result value (ids, amounts, times are far shorter)."""


def check_result(payload: Mapping[str, Any], result: Mapping[str, str], *, called_at: datetime) -> None:
    """Refuse a service's ``result`` to a call with request body ``payload`` started at ``called_at``
    (UTC, on the agent's clock).

    Raises:
        PermanentError: code :data:`INVALID_RESULT`: a value longer than
            :data:`MAX_RESULT_VALUE_CHARS`, or, for a hold request (``holdS`` in ``payload``), an
            ``expiresAt`` later than ``called_at`` + ``holdS`` + :data:`HOLD_EXPIRY_SKEW_S` (a service
            cannot grant more than asked). An unreadable ``expiresAt`` is left to the hold rule, which
            treats it as already expired.
    """
    for name, value in result.items():
        if len(value) > MAX_RESULT_VALUE_CHARS:
            raise PermanentError(
                INVALID_RESULT,
                f"result field {name[:64]!r} has {len(value)} characters, more than {MAX_RESULT_VALUE_CHARS}",
            )
    hold_s = payload.get("holdS")
    if not isinstance(hold_s, int) or isinstance(hold_s, bool) or not result.get("expiresAt"):
        return
    try:
        expires_at = parse_utc(result["expiresAt"])
    except ValueError:
        return
    latest = called_at + timedelta(seconds=hold_s + HOLD_EXPIRY_SKEW_S)
    if expires_at > latest:
        raise PermanentError(
            INVALID_RESULT,
            f"expiresAt {result['expiresAt']} is later than the {hold_s} s hold asked for at "
            f"{called_at.isoformat()} allows",
        )
