"""The blob-lease leader election on Azurite: the service calls the in-memory twin stands in for.

Each test uses a container of its own, so nothing is shared with other tests of the session. One test
waits for a real lease to expire (the service's minimum, 15 s); the others hand over by release.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from devhost.emulators import LocalEndpoints
from devhost.lease.blob import LeaderLease, current_holder
from devhost.lease.election import MIN_LEASE_S
from orderflow.errors import PermanentError, TransientError

pytestmark = pytest.mark.integration


def elector(endpoints: LocalEndpoints, blob_path: str, name: str) -> LeaderLease:
    return LeaderLease.from_connection_string(
        endpoints.storage_connection_string, blob_path, duration_s=MIN_LEASE_S, lease_id=name
    )


def ids(n: int) -> list[str]:
    # The service wants GUID-formatted lease ids.
    return [f"00000000-0000-4000-8000-{i:012d}" for i in range(n)]


def test_electors_racing_on_a_missing_blob_elect_exactly_one_leader(
    local_endpoints: LocalEndpoints, unique_name: str
) -> None:
    names = ids(4)
    candidates = [elector(local_endpoints, f"{unique_name}/supervisor", name) for name in names]
    barrier = threading.Barrier(len(candidates))
    won: dict[str, bool] = {}
    errors: list[BaseException] = []

    def run(candidate: LeaderLease) -> None:
        try:
            barrier.wait()
            won[candidate.lease_id] = candidate.acquire()  # creates the container and blob if missing
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in candidates]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    winners = [name for name, ok in won.items() if ok]
    assert len(winners) == 1
    assert [c.lease_id for c in candidates if c.is_leader] == winners
    leader = next(c for c in candidates if c.is_leader)
    assert leader.acquire() and leader.renew()  # re-acquiring with its own id just extends the lease
    assert [c.maintain() for c in candidates if c is not leader] == [False, False, False]
    leader.release()


def test_release_hands_over_at_once(local_endpoints: LocalEndpoints, unique_name: str) -> None:
    a, b = (elector(local_endpoints, f"{unique_name}/supervisor", name) for name in ids(2))
    assert a.acquire() and not b.acquire()
    a.release()
    assert not a.is_leader
    assert b.acquire()
    assert not a.renew()  # a holds nothing any more
    assert not a.acquire()
    b.release()


def test_each_holder_names_itself_on_the_blob_while_it_holds_the_lease(
    local_endpoints: LocalEndpoints, unique_name: str
) -> None:
    path = f"{unique_name}/supervisor"
    connection = local_endpoints.storage_connection_string
    a, b = (
        LeaderLease.from_connection_string(connection, path, lease_id=lease_id, holder={"host": host})
        for lease_id, host in zip(ids(2), ("h1", "h2"), strict=True)
    )
    assert current_holder(connection, path) is None  # no blob yet
    assert a.acquire()
    assert current_holder(connection, path) == {"host": "h1"}
    a.release()
    assert current_holder(connection, path) is None  # not leased
    assert b.acquire()
    assert current_holder(connection, path) == {"host": "h2"}
    assert b.renew()  # writing the metadata under the lease leaves the lease renewable
    b.release()


def test_the_stand_by_takes_over_within_one_period_after_the_leader_stops_renewing(
    local_endpoints: LocalEndpoints, unique_name: str
) -> None:
    a, b = (elector(local_endpoints, f"{unique_name}/supervisor", name) for name in ids(2))
    acquired_at = time.monotonic()
    assert a.acquire()
    a_stopped_at = b_started_at = None
    # a hangs from here on: it never renews. b polls as a stand-by would, a little faster.
    while b_started_at is None and time.monotonic() - acquired_at < MIN_LEASE_S + 5:
        leader_a = a.is_leader
        if b.maintain():
            b_started_at = time.monotonic()
            assert not leader_a and not a.is_leader, "two leaders at once"
        if a_stopped_at is None and not a.is_leader:
            a_stopped_at = time.monotonic()
        time.sleep(0.25)
    assert b_started_at is not None, "the stand-by never took over"
    assert a_stopped_at is not None and a_stopped_at < b_started_at
    # a's local guard ended its term a safety margin before the service let b in.
    assert a_stopped_at - acquired_at == pytest.approx(MIN_LEASE_S - a.safety_margin_s, abs=0.5)
    assert MIN_LEASE_S - 0.5 <= b_started_at - acquired_at <= MIN_LEASE_S + 1.5
    assert not a.renew()  # b has it now
    b.release()


def test_a_refused_request_is_permanent_and_an_unreachable_service_transient(
    local_endpoints: LocalEndpoints, unique_name: str
) -> None:
    wrong_key = re.sub(
        r"AccountKey=[^;]+", "AccountKey=d3Jvbmcta2V5", local_endpoints.storage_connection_string
    )
    refused = LeaderLease.from_connection_string(wrong_key, f"{unique_name}/supervisor")
    with pytest.raises(PermanentError):
        refused.maintain()  # a configuration error is not swallowed as a transient blip
    assert not refused.is_leader

    closed_port = re.sub(
        r"BlobEndpoint=http://127\.0\.0\.1:\d+", "BlobEndpoint=http://127.0.0.1:9", wrong_key
    )
    unreachable = LeaderLease.from_connection_string(closed_port, f"{unique_name}/supervisor")
    with pytest.raises(TransientError):
        unreachable.acquire()
    assert not unreachable.is_leader
