"""``python -m bench.probe ARGS...``: ``python -m devhost ARGS...`` with its HTTP and gRPC calls counted.

The benchmark starts its devhost processes through this module. Before the devhost opens any connection
it installs :func:`bench.counting.http.install_http_counter` (targets from
``BENCH_HTTP_TARGETS``, a JSON object ``{"host:port": "emulator"}``) and
:func:`bench.counting.grpc_calls.install_grpc_counter`; then it runs the devhost's own command line.
Nothing in the devhost knows it is counted.

On SIGUSR1 it writes ``{"seq": n, "http": {...}, "grpc": {...}}`` (the counts'
:meth:`~bench.counting.OperationCounts.snapshot`) to ``BENCH_PROBE_FILE``, replacing the file in one
rename; :func:`read_counts` asks for a snapshot and waits for it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from bench.counting import OperationCounts
from bench.counting.grpc_calls import install_grpc_counter
from bench.counting.http import HttpCounter, install_http_counter
from devhost.__main__ import cli

TARGETS_ENV = "BENCH_HTTP_TARGETS"
FILE_ENV = "BENCH_PROBE_FILE"
SNAPSHOT_SIGNAL = signal.SIGUSR1


class Probe:
    """The counts of this process, written to ``path`` on request."""

    def __init__(self, path: Path, targets: dict[str, str]) -> None:
        self.path = path
        self.http = HttpCounter(targets)
        self.grpc = OperationCounts()
        self._seq = 0
        self._lock = threading.Lock()

    def write(self) -> None:
        """Write the counts with the next sequence number (atomically: a reader never sees half)."""
        with self._lock:
            self._seq += 1
            data = {"seq": self._seq, "http": self.http.counts.snapshot(), "grpc": self.grpc.snapshot()}
            partial = self.path.with_suffix(".tmp")
            partial.write_text(json.dumps(data), encoding="utf-8")
            partial.replace(self.path)

    def on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        # Off the signal handler: the main thread may be anywhere, holding any lock.
        threading.Thread(target=self.write, name="probe-write", daemon=True).start()


def read_counts(pid: int, path: Path, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """Ask probe ``pid`` for its counts and return them once written.

    Raises:
        TimeoutError: no new snapshot within ``timeout_s``.
        ProcessLookupError: the process has gone.
    """
    previous = _seq(path)
    os.kill(pid, SNAPSHOT_SIGNAL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _seq(path) > previous:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return data
        time.sleep(0.01)
    raise TimeoutError(f"probe {pid} wrote no counts to {path} within {timeout_s} s")


def _seq(path: Path) -> int:
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["seq"])
    except (OSError, ValueError, KeyError):
        return 0


def main() -> None:
    """Install the counters, then hand the command line to ``python -m devhost``."""
    probe = Probe(Path(os.environ[FILE_ENV]), json.loads(os.environ.get(TARGETS_ENV, "{}")))
    install_http_counter(probe.http)
    install_grpc_counter(probe.grpc)
    signal.signal(SNAPSHOT_SIGNAL, probe.on_signal)
    probe.write()  # seq 1: the file exists from the start
    sys.argv[0] = "devhost"
    cli()


if __name__ == "__main__":
    main()
