"""The parts of a benchmark run: each run on its own, a failure noted instead of stopping the run, and
what makes a report a failed run (:func:`failures`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")
Progress = Callable[[str], None]

FAILED = "FAILED: "
"""Start of a note saying that a part of the run failed (its figures are missing)."""


def failures(report: Mapping[str, Any]) -> list[str]:
    """What makes a report a failed run: the notes that say a part failed, then every happy-path load
    (any ``outcomes`` outside ``hard_down``, whose orders are meant to fail) with an order that did not
    end ``Processed``: figures of such a run would compare unlike work."""
    failed = [str(note) for note in report.get("notes", []) if str(note).startswith(FAILED)]
    return failed + [
        f"{FAILED}{path}: orders not Processed: {outcomes}" for path, outcomes in _unprocessed(report, "")
    ]


def _unprocessed(node: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "hard_down":
                continue
            if key == "outcomes" and isinstance(value, Mapping):
                if any(outcome != "Processed" and n for outcome, n in value.items()):
                    found.append((path, dict(value)))
                continue
            found += _unprocessed(value, where)
    elif isinstance(node, list):  # the CPU comparison's further pairs
        for index, value in enumerate(node):
            found += _unprocessed(value, f"{path}.{index}")
    return found


class Parts:
    """Runs the parts of a benchmark, keeping the failures instead of stopping at the first."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self.failed: list[str] = []

    def say(self, message: str) -> None:
        """Tell ``message`` to the run's progress (a note as it is taken, not only in the report)."""
        self._progress(message)

    def run(
        self, name: str, part: Callable[[], T], *, expected: tuple[type[Exception], ...] = ()
    ) -> T | None:
        """``part()``, or None when it raised (noted as failed); ``expected`` errors are raised."""
        self._progress(name)
        try:
            return part()
        except expected:
            raise
        except Exception as exc:
            logger.exception("%s failed", name)
            self.failed.append(f"{FAILED}{name}: {type(exc).__name__}: {str(exc)[:300]}")
            self._progress(f"{name} failed: {type(exc).__name__}")
            return None
