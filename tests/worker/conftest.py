"""Fixtures of the worker-driven tests: one real Python language worker for the session.

These tests run in the worker's own environment (Python 3.13+, ``azure-functions-runtime`` and the app's
requirements: ``make worker-test`` builds ``.venv-worker`` from ``requirements-worker.txt``). Anywhere
else they fail with the command that sets that environment up; they are never skipped.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

if sys.version_info < (3, 13) or importlib.util.find_spec("azure_functions_runtime") is None:
    pytest.exit(
        "the worker-driven tests need Python 3.13+ with azure-functions-runtime: run `make worker-test` "
        "(Python 3.13 missing? `pyenv install 3.13`)",
        returncode=2,
    )

from tests.worker.durable_http import DurableExtension  # noqa: E402
from tests.worker.settlement import SettlementServer  # noqa: E402
from tests.worker.worker import FunctionsWorker  # noqa: E402


@pytest.fixture(scope="session")
def settlement() -> Iterator[SettlementServer]:
    """The host's Settlement service, recording what the extension's message actions send it."""
    server = SettlementServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def worker(settlement: SettlementServer) -> Iterator[FunctionsWorker]:
    """The worker, initialised on this repository's app with every function loaded."""
    functions_worker = FunctionsWorker(REPO, settlement_port=settlement.port)
    functions_worker.start()
    try:
        yield functions_worker
    finally:
        functions_worker.stop()


@pytest.fixture(scope="module")
def extension_server(worker: FunctionsWorker) -> Iterator[DurableExtension]:
    """The extension's HTTP API, knowing the app's orchestrators as the worker indexed them."""
    names = {
        name
        for name, function in worker.metadata.items()
        if any(json.loads(raw)["type"] == "orchestrationTrigger" for raw in function.raw_bindings)
    }
    server = DurableExtension(names)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def extension(extension_server: DurableExtension) -> DurableExtension:
    extension_server.reset()
    return extension_server
