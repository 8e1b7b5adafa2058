"""Two revisions compared by what their processes do per order, not by how long it took.

CPU per order on a shared 2-core machine spreads by a fifth for the same code (docs/benchmarks.md);
the number of calls a process makes per order does not. :mod:`bench.callcount.sitecustomize` writes a
per-thread ``cProfile`` of each chosen process (every call, and each function's time on the thread's
CPU clock); :func:`per_order` reads one such file per order and :func:`compare` sets two side by side,
by package and by function. A profile covers the process's whole life, start-up included: compare
runs of the same orders, or take the difference of two run lengths.
"""

from __future__ import annotations

import pstats
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

BUILTIN = "builtin"
STDLIB = "stdlib"


@dataclass(frozen=True)
class PerOrder:
    """One profile's figures per order.

    Attributes:
        calls: Calls per order by key (:func:`key_of`).
        cpu_ms: Own CPU milliseconds per order by the same keys (inflated by the profiler itself).
    """

    calls: dict[str, float]
    cpu_ms: dict[str, float]

    @property
    def total_calls(self) -> float:
        """Every call per order."""
        return sum(self.calls.values())

    @property
    def total_cpu_ms(self) -> float:
        """Every function's own CPU per order, milliseconds."""
        return sum(self.cpu_ms.values())


def key_of(path: str, function: str, *, root: str, by: str) -> str:
    """What a profiled function is counted under.

    Args:
        path: The function's file as the profile names it (``~`` for a built-in).
        function: Its name.
        root: The checkout the profile ran in: files under it are named relative to it, so that two
            checkouts' functions meet.
        by: ``package`` (the top folder of the checkout, the installed distribution, ``stdlib`` or
            ``builtin``) or ``function`` (that, a colon and the function's name).

    Raises:
        ValueError: ``by`` is neither.
    """
    if by not in ("package", "function"):
        raise ValueError(f"by must be 'package' or 'function', not {by!r}")
    if "site-packages/" in path:
        package = path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    elif path == "~":
        package = BUILTIN
    elif path.startswith(root.rstrip("/") + "/"):
        package = path[len(root.rstrip("/")) + 1 :].split("/", 1)[0].removesuffix(".py")
    else:
        package = STDLIB
    return package if by == "package" else f"{package}:{function}"


def per_order(path: Path, orders: int, *, root: str, by: str = "package") -> PerOrder:
    """The calls and own CPU per order of the profile at ``path`` (:func:`key_of` keys).

    Raises:
        ValueError: ``orders`` is not positive, or ``by`` is not a key kind.
        OSError: the file cannot be read.
    """
    if orders < 1:
        raise ValueError("orders must be at least 1")
    calls: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    for (file, _line, function), (_primitive, count, own, _cumulative, _callers) in pstats.Stats(
        str(path)
    ).stats.items():  # type: ignore[attr-defined]
        key = key_of(file, function, root=root, by=by)
        calls[key] += count
        seconds[key] += own
    return PerOrder(
        calls={k: v / orders for k, v in calls.items()},
        cpu_ms={k: 1000 * v / orders for k, v in seconds.items()},
    )


def compare(
    before: PerOrder, after: PerOrder, *, top: int = 20
) -> list[tuple[str, float, float, float, float]]:
    """The ``top`` keys whose calls per order moved most: ``(key, calls before, calls after, own CPU ms
    before, own CPU ms after)``, the largest change first (a key absent from one side counts 0)."""
    keys = set(before.calls) | set(after.calls)
    ranked = sorted(keys, key=lambda k: (-abs(after.calls.get(k, 0.0) - before.calls.get(k, 0.0)), k))
    return [
        (
            key,
            before.calls.get(key, 0.0),
            after.calls.get(key, 0.0),
            before.cpu_ms.get(key, 0.0),
            after.cpu_ms.get(key, 0.0),
        )
        for key in ranked[:top]
    ]
