"""CPU time of processes from their own counters (``/proc/<pid>/stat``), not from wall time.

A process's CPU time is its own user plus system time (every thread, no children). A
:class:`CpuClock` samples named processes; two samples give each process's CPU seconds over the time
between them (:func:`cpu_between`). The whole machine's busy time comes from ``/proc/stat``, and a
process's peak resident memory from its ``/proc/<pid>/status`` (:func:`peak_rss_mb`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Ticks per second of the counters in ``/proc`` (``_SC_CLK_TCK``)."""

PROC = Path("/proc")


def parse_stat(text: str) -> tuple[int, int, int, int]:
    """``utime, stime, cutime, cstime`` (clock ticks) of one ``/proc/<pid>/stat`` line.

    The command name (field 2, in parentheses) may itself hold spaces and parentheses: fields are
    counted from the last ``)``.

    Raises:
        ValueError: the text is not a stat line.
    """
    end = text.rfind(")")
    if end < 0:
        raise ValueError("not a /proc/<pid>/stat line")
    fields = text[end + 2 :].split()
    # fields[0] is the state (stat field 3): utime..cstime are stat fields 14-17.
    if len(fields) < 15:
        raise ValueError("not a /proc/<pid>/stat line")
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return utime, stime, cutime, cstime


def parse_machine_stat(text: str) -> tuple[int, int]:
    """``(busy, total)`` clock ticks of all CPUs from ``/proc/stat``'s first line (idle and iowait are
    not busy).

    Raises:
        ValueError: no ``cpu`` line.
    """
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(value) for value in fields[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            total = sum(values[:8])  # guest time is already counted in user
            return total - idle, total
    raise ValueError("no cpu line in /proc/stat")


def process_cpu_s(pid: int, *, proc: Path = PROC, ticks: int = CLOCK_TICKS) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used so far; None once it has gone.

    Its own threads only, not its children's: the benchmark's process is the parent of every process
    it measures, and each of those is measured by its own counters.
    """
    try:
        utime, stime, _cutime, _cstime = parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError):
        return None
    return (utime + stime) / ticks


def child_pids(pid: int, *, proc: Path = PROC) -> list[int]:
    """Pids of process ``pid``'s children (``/proc/<pid>/task/<tid>/children`` of every thread), sorted;
    empty once it has gone."""
    found: set[int] = set()
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            found.update(int(word) for word in (task / "children").read_text().split())
        except OSError:
            continue  # the thread ended meanwhile
    return sorted(found)


def parse_peak_rss_kb(status: str) -> int | None:
    """The ``VmHWM`` line of a ``/proc/<pid>/status`` text (kB): the process's peak resident set since
    it started; None when absent (a kernel thread)."""
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def peak_rss_mb(pid: int, *, proc: Path = PROC) -> float | None:
    """Peak resident memory of process ``pid`` since it started (MB of 10^6 bytes, from its ``VmHWM``
    in kB of 1,024 bytes); None when the process is gone or the kernel does not say."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    kb = parse_peak_rss_kb(text)
    return None if kb is None else round(kb * 1024 / 1e6, 1)


def machine_busy_s(*, proc: Path = PROC, ticks: int = CLOCK_TICKS) -> float:
    """Busy CPU seconds of the whole machine since boot (every core)."""
    busy, _total = parse_machine_stat((proc / "stat").read_text())
    return busy / ticks


Sampler = Callable[[int], float | None]


class CpuClock:
    """Samples the CPU seconds of named processes.

    Args:
        pids: Name -> pid of the processes to sample.
        sample: Reads one process's CPU seconds (default :func:`process_cpu_s`).
    """

    def __init__(self, pids: Mapping[str, int], *, sample: Sampler = process_cpu_s) -> None:
        self.pids = dict(pids)
        self._sample = sample

    def __repr__(self) -> str:
        return f"CpuClock({sorted(self.pids)})"

    def sample(self) -> dict[str, float]:
        """CPU seconds of each process still running, by name (a gone process is left out)."""
        out: dict[str, float] = {}
        for name, pid in self.pids.items():
            seconds = self._sample(pid)
            if seconds is not None:
                out[name] = seconds
        return out


def cpu_between(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds each process used between two samples (processes in both), rounded to 1 ms."""
    return {name: round(after[name] - before[name], 3) for name in after if name in before}
