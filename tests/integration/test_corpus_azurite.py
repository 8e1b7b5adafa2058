"""The bad-input corpus (``tests/corpus``) through a devhost consuming a real Azurite Storage queue and
writing to cosmosdb-server through azure-cosmos: one pass, every case the Storage transport can carry.

The host runs with the default queue names, which the manifest's reasons assume (``replyTo: "orders"``
is the submission queue). No other test of the session uses them; the state store is a database of
this test's own, and only this run's message ids are looked at.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from devhost.emulators import LocalEndpoints
from devhost.settings import load_settings
from tests.corpus import STORAGE, load_cases, problems, run_through_devhost
from tests.harness import emulator_dependencies

pytestmark = pytest.mark.integration


def test_the_corpus_through_azurite_and_cosmosdb_server(local_endpoints: LocalEndpoints) -> None:
    deps, close = emulator_dependencies(local_endpoints)
    cases = load_cases()
    settings, local = load_settings({}, POLL_INTERVAL_S=0.02, POLL_MAX_INTERVAL_S=0.1, HOST_ID="corpus")
    try:
        run = run_through_devhost(
            replace(deps, settings=settings, local=local),
            cases,
            run_id=f"az{uuid.uuid4().hex[:8]}",
            timeout_s=30,
        )
        found = problems(run, deps)
    finally:
        close()

    assert found == []
    assert len(run.dead_letters) == len(run.cases) == sum(STORAGE in case.transports for case in cases)
