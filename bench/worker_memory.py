"""A lower bound of the Functions worker's memory: the app imported by the worker venv's interpreter
(Python 3.13 with the app's requirements, ``requirements-worker.txt``), Application Insights configured as
on Azure, its peak resident set read from the process itself. The language worker's own modules, its
gRPC channel and the invocations add to it. The Flex instance's memory is chosen against it
(docs/deploy.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Final

from bench.counting.cpu import parse_peak_rss_kb
from bench.orderflow_runs.telemetry import IngestionStub

WORKER_VENV_PYTHON: Final = Path(".venv-worker/bin/python")
"""The worker venv's interpreter, under the repository (the Makefile's ``WORKER_VENV``)."""

FOOTPRINT_CODE: Final = "import function_app, pathlib\nprint(pathlib.Path('/proc/self/status').read_text())\n"
"""Imports the app (every role, the bindings, the telemetry) and prints its ``/proc/self/status``, whose
``VmHWM`` is the process's own peak resident set. Not ``ru_maxrss``: Linux carries the peak of the
address space a process was forked from across ``exec``, so a child of a large process reports its
parent's peak."""

QUIET_EXPORTER: Final = {
    "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
    "APPLICATIONINSIGHTS_SDKSTATS_DISABLED": "true",
}
"""No statsbeat to Microsoft's endpoint, no exporter counts posted after the stub is gone."""


def worker_footprint(python: Path, repo: Path, *, timeout_s: float = 120.0) -> dict[str, Any]:
    """Peak resident memory of ``python`` (the worker venv's interpreter) once it has imported the app in
    ``repo`` with Application Insights configured (to a local ingestion endpoint).

    Returns:
        ``{"peak_rss_mb": MB of 10^6 bytes, "python": str, "method": str}``.

    Raises:
        FileNotFoundError: ``python`` does not exist (the worker's venv is not set up).
        RuntimeError: the import failed (its stderr's tail in the message).
    """
    if not python.exists():
        raise FileNotFoundError(f"{python}: the worker's venv is not set up (make bench sets it up)")
    with IngestionStub() as stub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERFLOW_")}
        env.update(QUIET_EXPORTER)
        env["APPLICATIONINSIGHTS_CONNECTION_STRING"] = stub.connection_string
        done = subprocess.run(
            [str(python), "-c", FOOTPRINT_CODE],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"importing the app failed: {done.stderr[-2000:]}")
    kib = parse_peak_rss_kb(done.stdout)
    if kib is None:
        raise RuntimeError(f"no VmHWM in the worker's status: {done.stdout[-500:]}")
    return {
        "peak_rss_mb": round(kib * 1024 / 1e6, 1),
        "python": str(python),
        "method": "the worker venv's interpreter imports function_app with Application Insights "
        "configured; its VmHWM",
    }
