"""The demo services as ``make demo`` runs them: ``python -m demo.services``, a process of its own on a free
loopback port, accepting only tokens signed by a local issuer's key file.

The worker's environment (Python 3.13 and the app's requirements) holds no web framework, so the services
run in the project's ``.venv`` (Python 3.11 and ``requirements-dev.txt``), which ``make worker-test``
builds first. They load the small TPC-H fixture of ``tests/data/tpch``.
"""

from __future__ import annotations

import os
import select
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.worker.conftest import REPO

DEMO_PYTHON = REPO / ".venv" / "bin" / "python"
"""The interpreter of the project's environment, which has the demo services' web framework."""
TPCH_FIXTURE = REPO / "tests" / "data" / "tpch"
"""The TPC-H tables the services load: stock of SKU 10 and others, a few customers."""
READY = "demo services listening on "
"""What the services print once they answer, followed by their URL."""


def _ready_url(process: subprocess.Popen[str], deadline: float) -> str | None:
    """The URL the services print once ready, or None when they exit or ``deadline`` passes first."""
    assert process.stdout is not None
    while time.monotonic() < deadline:
        readable, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            return None
        line = process.stdout.readline()
        if not line:  # exited
            return None
        if line.startswith(READY):
            return line.removeprefix(READY).strip()
    return None


@contextmanager
def demo_services(key_file: Path, *, start_timeout_s: float = 60.0) -> Iterator[str]:
    """Run the demo services trusting ``key_file``'s tokens until the context ends; yields their URL.

    Raises:
        pytest.fail.Exception: ``.venv`` is missing, or the services did not start in
            ``start_timeout_s`` seconds (with what they wrote on stderr).
    """
    if not DEMO_PYTHON.exists():
        pytest.fail(f"{DEMO_PYTHON} is missing: run `make setup` (make worker-test does)")
    command = [str(DEMO_PYTHON), "-m", "demo.services", "--port", "0", "--data-dir", str(TPCH_FIXTURE)]
    command += ["--orders", "0", "--stock-divisor", "1", "--key-file", str(key_file)]
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=errors, text=True, env=dict(os.environ)
        )
        try:
            url = _ready_url(process, time.monotonic() + start_timeout_s)
            if url is None:
                errors.seek(0)
                pytest.fail(f"the demo services did not start: {errors.read()[-2000:]}")
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            assert process.stdout is not None
            process.stdout.close()
