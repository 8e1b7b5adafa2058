"""One exception hierarchy for orderflow, each failure with an :class:`ErrorKind`.

Mapping an error to a message settlement (complete, abandon, dead-letter) or to an HTTP status happens
only at the edge (hosts and consumer loops); roles raise.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import ClassVar


class ErrorKind(StrEnum):
    """What kind of failure this is, which decides what the caller may do next.

    ``transient`` may succeed on retry; ``permanent`` never will; ``timeout`` is a deadline that
    passed; ``conflict`` is a lost optimistic-concurrency race or conflicting content; ``invalid`` is
    bad input; ``unauthenticated`` is a caller whose credentials did not prove who it is;
    ``forbidden`` is a proven caller without the right to do what it asked.
    """

    TRANSIENT = "transient"
    PERMANENT = "permanent"
    TIMEOUT = "timeout"
    CONFLICT = "conflict"
    INVALID = "invalid"
    NOT_FOUND = "not_found"
    BUDGET = "budget_exhausted"
    UNAVAILABLE = "unavailable"
    """A dependency known to be down (its circuit breaker is open): no call was made; wait and retry."""
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    WORKFLOW = "workflow"
    """The orchestration's own code failed (a poison input, a bug of its workflow version)."""


TRANSIENT_EXHAUSTED = "transient_exhausted"
"""An agent's code: transient faults outlasted its retries within the deadline, or its calls ran out."""
DEADLINE_EXCEEDED = "deadline_exceeded"
"""An agent's code: the step's deadline passed before the remote service answered."""
WORKFLOW_ERROR = "workflow_error"
"""The code the orchestration records when its own code raised (:attr:`ErrorKind.WORKFLOW`)."""


class OrderflowError(Exception):
    """Base class of every error orderflow raises on purpose.

    The message always starts with ``[kind]`` so that the kind survives runtimes that carry only an
    exception's text across process boundaries (Durable Functions activity failures).
    """

    kind: ClassVar[ErrorKind] = ErrorKind.PERMANENT

    def __init__(self, message: str) -> None:
        self.detail = message
        super().__init__(f"[{self.kind.value}] {message}")


class ConcurrencyConflict(OrderflowError):
    """A conditional write found a different ETag (HTTP 412): someone else moved the record."""

    kind = ErrorKind.CONFLICT


class AlreadyExists(OrderflowError):
    """A create found an item with the same id (HTTP 409)."""

    kind = ErrorKind.CONFLICT


class NotFound(OrderflowError):
    """The item does not exist (HTTP 404)."""

    kind = ErrorKind.NOT_FOUND


class IllegalTransition(OrderflowError):
    """A state change the state machine does not allow (a programming or protocol error)."""

    kind = ErrorKind.PERMANENT


class InvalidMessage(OrderflowError):
    """A message failed validation. ``reason`` is a short machine-readable dead-letter reason."""

    kind = ErrorKind.INVALID

    def __init__(self, reason: str, description: str) -> None:
        self.reason = reason
        self.description = description
        super().__init__(f"{reason}: {description}")


class ConflictingOrder(OrderflowError):
    """An order id was submitted again with different immutable content (docs/design.md §2)."""

    kind = ErrorKind.CONFLICT
    reason = "ConflictingOrder"


class TransientError(OrderflowError):
    """A dependency failed in a way that may succeed on retry (5xx, timeouts, throttling)."""

    kind = ErrorKind.TRANSIENT


class DeadLettersBusy(TransientError):
    """A dead-letter read or removal could not cover the whole queue in its time: other operations held
    part of it (a Storage queue is read by receiving, which hides what it reads). Never a short list or
    a "nothing removed": the caller tries again (docs/operations.md#dead-letters).

    Attributes:
        queue: The queue whose dead letters were being read.
    """

    def __init__(self, queue: str) -> None:
        self.queue = queue
        super().__init__(f"the dead-letter queue of {queue!r} is being read by another operation; try again")


SERVICE_AUTH_REFUSED = "service_auth_refused"
"""An agent's code: the remote service refused the agent's credential (HTTP 401 or 403)."""


class ServiceAuthRefused(TransientError):
    """A remote service refused the agent's credential (HTTP 401: no valid token; 403: no right).

    A configuration fault (a binding's scope, the identity's app role), never a business refusal: the
    agent raises the ``service_auth_refused`` alert and answers a transient failure, so the order is
    retried and, while the refusal lasts, held by the service's circuit breaker instead of compensated.

    Attributes:
        service: The agent's service.
        status: The HTTP status (401 or 403).
        code: The service's error code, or ``http_<status>``.
    """

    def __init__(self, service: str, status: int, code: str) -> None:
        self.service = service
        self.status = status
        self.code = code
        super().__init__(
            f"{SERVICE_AUTH_REFUSED}: {service} refused the agent's credential ({code}, HTTP {status}); "
            "check the service binding's auth scope and the identity's app role"
        )


class PermanentError(OrderflowError):
    """A dependency refused in a way no retry will change (4xx business rejections).

    Attributes:
        code: The remote service's error code, e.g. ``out_of_stock`` or ``card_declined``.
    """

    kind = ErrorKind.PERMANENT

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"{code}: {message}")


class DeadlineExceeded(OrderflowError):
    """The step's ``completeBy`` passed before the work could start or finish."""

    kind = ErrorKind.TIMEOUT


class DependencyUnavailable(OrderflowError):
    """A dependency's circuit breaker is open (orderflow.breaker): no call is made until ``retry_at``.

    Attributes:
        dependency: The dependency (an agent name).
        retry_at: When the breaker lets a probe through (UTC).
    """

    kind = ErrorKind.UNAVAILABLE

    def __init__(self, dependency: str, retry_at: datetime) -> None:
        self.dependency = dependency
        self.retry_at = retry_at
        super().__init__(f"{dependency} is unavailable (circuit open) until {retry_at.isoformat()}")


_KIND_MARKER = re.compile(r"\[(" + "|".join(re.escape(kind.value) for kind in ErrorKind) + r")\]")


def kind_of(text: str) -> ErrorKind | None:
    """Recover the :class:`ErrorKind` from an error text produced by :class:`OrderflowError`: the one
    reader of the ``[kind]`` marker its constructor writes.

    Args:
        text: An exception message, possibly wrapped by a runtime (``"Activity failed: [fenced] ..."``).

    Returns:
        The kind of the first ``[kind]`` marker in the text (a remote detail quoted after it, which may
        hold another marker, does not count), or None.
    """
    found = _KIND_MARKER.search(text)
    return None if found is None else ErrorKind(found.group(1))


class InvalidContinuation(OrderflowError):
    """A query continuation token was rejected or repeated: restart the scan from the beginning."""

    kind = ErrorKind.INVALID
