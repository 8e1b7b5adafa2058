"""The benchmark's arithmetic: percentiles, latency summaries, throughput, ratios and targets.

Pure functions over plain numbers; times are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` by linear interpolation between closest ranks.

    The same definition as NumPy's default (``method="linear"``): rank ``(n - 1) * q / 100`` in the
    sorted values, interpolated between its neighbours.

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside [0, 100].
    """
    if not values:
        raise ValueError("no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is outside [0, 100]")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float | int | None]:
    """``count``, ``mean_s``, ``p50_s``, ``p95_s``, ``p99_s`` and ``max_s`` of latencies in seconds,
    rounded to the millisecond (the figures are None when there are none)."""
    if not latencies_s:
        return {"count": 0, "mean_s": None, "p50_s": None, "p95_s": None, "p99_s": None, "max_s": None}
    return {
        "count": len(latencies_s),
        "mean_s": round(sum(latencies_s) / len(latencies_s), 3),
        "p50_s": round(percentile(latencies_s, 50), 3),
        "p95_s": round(percentile(latencies_s, 95), 3),
        "p99_s": round(percentile(latencies_s, 99), 3),
        "max_s": round(max(latencies_s), 3),
    }


def throughput(finished: int, elapsed_s: float) -> float | None:
    """Orders per second, to two decimals; None when nothing was timed."""
    if elapsed_s <= 0:
        return None
    return round(finished / elapsed_s, 2)


def ratio(numerator: float | None, denominator: float | None, *, digits: int = 2) -> float | None:
    """``numerator / denominator`` rounded; None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return round(numerator / denominator, digits)


def per_order(total: int, orders: int, *, digits: int = 2) -> float:
    """``total / orders`` rounded (an exact integer stays integral in value).

    Raises:
        ValueError: ``orders`` is not positive.
    """
    if orders <= 0:
        raise ValueError("orders must be positive")
    return round(total / orders, digits)


def at_most(value: float | None, target: float) -> dict[str, Any]:
    """A target of the form "at most ``target``": ``{value, target, met}`` (``met`` None without one)."""
    return {"value": value, "target": target, "met": None if value is None else value <= target}


def below(value: float | None, target: float) -> dict[str, Any]:
    """A target of the form "less than ``target``": ``{value, target, met}`` (``met`` None without one)."""
    return {"value": value, "target": target, "met": None if value is None else value < target}
