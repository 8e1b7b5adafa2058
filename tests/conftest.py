"""Shared fixtures: the local emulators, started once per test session on free loopback ports.

The emulators start lazily, only when a test asks for them, and stop at the end of the session. A
missing emulator fails the test with the install command; it is never skipped.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import uuid
from collections.abc import Iterator

import pytest

from devhost.emulators import LocalEmulators, LocalEndpoints, start_local_emulators
from orderflow import telemetry
from tests.operator_tokens import TrustedIssuer, trusted_issuer

TEST_CLIENTS = '[{"id": "a", "replyQueue": "client-a"}]'
"""The client registry of the Functions app under test: its triggers are generated from ``CLIENTS`` when
it is indexed, so the setting must be there before the first blueprint is imported (and in the worker's
environment). One client ``a``: inbound queue ``orders-a``, reply queue ``client-a`` (``tests.unit.fakes``'s
``TEST_CLIENT``)."""
os.environ.setdefault("CLIENTS", TEST_CLIENTS)

# Log records as the hosts make them (configure_telemetry installs the guard): every test sees the same
# records whether or not an earlier test in its process imported function_app, which installs it.
telemetry.guard_log_records()

# A pytest-xdist worker starts with COLUMNS and LINES set to 80 by 24. The CLI's rich console, made when
# orderflow_client.cli_common is imported, would keep that width whatever width a test invokes the CLI with.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)

# tests/worker drives the Python 3.13+ language worker in its own environment (`make worker-test`).
collect_ignore = [] if importlib.util.find_spec("azure_functions_runtime") else ["worker"]

# The SDKs log every request at INFO; keep test output to what orderflow says.
for _noisy in ("durabletask", "azure", "httpx", "urllib3"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def local_emulators() -> Iterator[LocalEmulators]:
    """Azurite and cosmosdb-server for this test session."""
    emulators = start_local_emulators()
    try:
        yield emulators
    finally:
        emulators.stop()


@pytest.fixture(scope="session")
def local_endpoints(local_emulators: LocalEmulators) -> LocalEndpoints:
    """Connection details of the session's emulators."""
    return local_emulators.endpoints


@pytest.fixture(scope="session")
def trusted() -> Iterator[TrustedIssuer]:
    """A local token issuer the operator API trusts, its JWKS on loopback, for this test session."""
    with trusted_issuer() as issuer:
        yield issuer


@pytest.fixture
def unique_name() -> str:
    """A short unique lowercase name for a queue, container or database used by one test."""
    return "t" + uuid.uuid4().hex[:12]
