"""The orchestration's custom status: the one format the workflow writes and the listener reads.

The workflow sets it before it starts work that will be answered, so the status is committed before
any answer can exist; the response listener raises an answer's event only on an instance waiting for
it (docs/design.md §7: a buffered event could otherwise be taken by a later wait of the same name).

- ``waiting:<step>`` before a step's request is sent; ``waiting:<a>:undo,<b>:undo`` for a stage of
  undos run in parallel (:func:`waiting`);
- ``review:<step>`` while the order awaits a person's decision before ``step`` (:func:`awaiting_review`);
- ``compensating`` while the compensation log is read back (:data:`COMPENSATING`).

:func:`parse` reads any of them back; anything else (no status, another writer's) is :class:`Other`.
"""

from __future__ import annotations

from dataclasses import dataclass

WAITING_PREFIX = "waiting:"
REVIEW_PREFIX = "review:"
COMPENSATING = "compensating"
"""The custom status while the orchestration moves to compensation."""


def waiting(*steps: str) -> str:
    """The status of an instance about to send the requests of ``steps`` (one, or a parallel stage).

    Raises:
        ValueError: no step, or a step name with a comma (the separator).
    """
    if not steps or any(not step or "," in step for step in steps):
        raise ValueError(f"cannot write a waiting status for steps {steps!r}")
    return WAITING_PREFIX + ",".join(steps)


def awaiting_review(step: str) -> str:
    """The status of an instance awaiting a person's decision before ``step``."""
    return REVIEW_PREFIX + step


@dataclass(frozen=True)
class Waiting:
    """The instance waits for the answers of ``steps``."""

    steps: tuple[str, ...]


@dataclass(frozen=True)
class AwaitingReview:
    """The instance waits for a person's decision before ``step``."""

    step: str


@dataclass(frozen=True)
class Compensating:
    """The instance is moving to compensation."""


@dataclass(frozen=True)
class Other:
    """No status orderflow wrote (none yet, or the instance finished)."""


CustomStatus = Waiting | AwaitingReview | Compensating | Other


def parse(status: str | None) -> CustomStatus:
    """Read a custom status written by this module (``None`` and anything else are :class:`Other`)."""
    if status is None:
        return Other()
    if status.startswith(WAITING_PREFIX) and len(status) > len(WAITING_PREFIX):
        return Waiting(tuple(status[len(WAITING_PREFIX) :].split(",")))
    if status.startswith(REVIEW_PREFIX) and len(status) > len(REVIEW_PREFIX):
        return AwaitingReview(status[len(REVIEW_PREFIX) :])
    if status == COMPENSATING:
        return Compensating()
    return Other()
