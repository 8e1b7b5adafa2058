"""Fixtures for integration tests: the same dependencies on the in-memory adapters and the emulators."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devhost.emulators import LocalEndpoints
from tests.harness import emulator_dependencies, memory_dependencies
from tests.host_deps import HostDeps


@pytest.fixture(params=["memory", "emulators"])
def deps(request: pytest.FixtureRequest) -> Iterator[HostDeps]:
    """Stores and queues: in-memory, or Cosmos DB API on cosmosdb-server plus Azurite queues; the system
    clock and the default settings, which a test replaces as it needs."""
    if request.param == "memory":
        made, close = memory_dependencies()
    else:
        endpoints: LocalEndpoints = request.getfixturevalue("local_endpoints")
        made, close = emulator_dependencies(endpoints)
    try:
        yield made
    finally:
        close()
