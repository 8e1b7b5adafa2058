"""Operation counts of the port adapters, for benchmarks and tests of operation budgets.

:class:`OperationCounts` is a thread-safe tally of ``(operation, label)`` pairs; the counting wrappers
(:mod:`bench.counting.stores`, :mod:`bench.counting.queues`) feed it. A label says who made the
call: a queue's role, or the function that called a store (:func:`calling_function`), so a benchmark
can show where each write comes from without the roles knowing they are counted.
"""

from __future__ import annotations

import inspect
import threading
from collections import Counter
from collections.abc import Callable, Sequence

CallerLabel = Callable[[], str]
"""Returns the label of the call being counted (asked on the caller's thread, inside the call)."""

UNLABELLED = ""
"""The label of a call counted without a :data:`CallerLabel`."""


class OperationCounts:
    """Thread-safe counts of operations, each under a label.

    Operations are short names chosen by the wrapper (``create``, ``replace``, ``send`` ...); labels
    name the caller or the queue role, or are :data:`UNLABELLED`.
    """

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(operations={len(self._counts)})"

    def add(self, operation: str, label: str = UNLABELLED, n: int = 1) -> None:
        """Count ``n`` more of ``operation`` under ``label``."""
        with self._lock:
            self._counts[(operation, label)] += n

    def total(self, operation: str) -> int:
        """Every count of ``operation``, whatever its label."""
        with self._lock:
            return sum(n for (op, _), n in self._counts.items() if op == operation)

    def by_label(self, operation: str) -> dict[str, int]:
        """Counts of ``operation`` per label (labels never counted are absent)."""
        with self._lock:
            return {label: n for (op, label), n in sorted(self._counts.items()) if op == operation and n}

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Every count, as ``{operation: {label: count}}``, sorted."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for (op, label), n in sorted(self._counts.items()):
                out.setdefault(op, {})[label] = n
        return out

    def reset(self) -> None:
        """Forget every count."""
        with self._lock:
            self._counts.clear()


def _in(module: str, prefixes: Sequence[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def calling_function(*, skip_modules: Sequence[str] = ()) -> CallerLabel:
    """A :data:`CallerLabel` naming the function that made the call, ``module.function``.

    It walks the calling thread's stack outwards and returns the first frame that is a public function
    (name not starting with ``_`` or ``<``) outside ``bench.counting``, ``orderflow.stores`` and
    ``orderflow.queues`` (the ports and their adapters) and outside ``skip_modules`` (shared helpers
    such as a write primitive, so the label names the role function that used it). A private helper
    is passed over too: its public caller is named. Costs a few microseconds per call: for benchmarks,
    not for production paths.

    Args:
        skip_modules: More modules (or packages, matched with their submodules) to look through.

    Returns:
        The label function; it answers ``"unknown"`` when no frame qualifies.
    """
    skipped = ("bench.counting", "orderflow.stores", "orderflow.queues", *skip_modules)

    def label() -> str:
        frame = inspect.currentframe()
        while frame is not None:
            module = str(frame.f_globals.get("__name__", ""))
            name = frame.f_code.co_name
            if not name.startswith(("_", "<")) and not _in(module, skipped):
                return f"{module}.{name}"
            frame = frame.f_back
        return "unknown"

    return label
