"""The store contract: one suite run against every state-store and order-store adapter.

Each test runs twice: on the in-memory stores (marker ``unit``) and on the Cosmos DB adapters over the
session's cosmosdb-server (marker ``integration``), each Cosmos test in a database of its own. What a
role may rely on is exactly what this file asserts; an adapter that passes it is interchangeable.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from azure.cosmos.exceptions import CosmosHttpResponseError

from devhost.emulators import LocalEndpoints
from orderflow.errors import AlreadyExists, ConcurrencyConflict, InvalidContinuation, NotFound
from orderflow.records import (
    REDACTED,
    CompensationEntry,
    LastError,
    OrderDocument,
    OrderItem,
    PendingReply,
    ProcessState,
    RetryBudget,
    StateRecord,
    StepState,
    StepStatus,
)
from orderflow.stores.base import (
    OrderStore,
    Page,
    Redaction,
    StateQuery,
    StateStore,
    Versioned,
)
from orderflow.stores.cosmos import CosmosStores
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow.timeline import TIMELINE_KEEP, TIMELINE_WINDOW, Actor, merged, note

# cosmosdb-server's certificate is self-signed; the SDK is told not to verify it (verify_tls=False).
pytestmark = pytest.mark.filterwarnings("ignore:Unverified HTTPS request")

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
"""The tests' "now": every deadline in the data set is placed relative to it."""

PLUS_TWO = timezone(timedelta(hours=2))


@dataclass
class Stores:
    """The adapters under test, a way to open a second, independent handle on the same data, and the
    order documents exactly as stored (system properties dropped)."""

    adapter: str
    state: StateStore
    orders: OrderStore
    open_state: Callable[[], StateStore]
    open_orders: Callable[[], OrderStore]
    stored_order: Callable[[str], dict[str, Any]]


ADAPTERS = [
    pytest.param("memory", marks=pytest.mark.unit, id="memory"),
    pytest.param("cosmos", marks=pytest.mark.integration, id="cosmos"),
]


@pytest.fixture(params=ADAPTERS)
def stores(request: pytest.FixtureRequest, unique_name: str) -> Iterator[Stores]:
    """Fresh, empty stores of one adapter (a new Cosmos database per test)."""
    if request.param == "memory":
        state, orders = InMemoryStateStore(), InMemoryOrderStore()
        yield Stores(
            "memory", state, orders, lambda: state, lambda: orders, lambda order_id: stored(orders, order_id)
        )
        return
    # Looked up lazily so the in-memory runs never start the emulators.
    endpoints: LocalEndpoints = request.getfixturevalue("local_endpoints")

    def connect() -> CosmosStores:
        return CosmosStores.connect(
            endpoints.cosmos_endpoint,
            key=endpoints.cosmos_key,
            database=unique_name,
            verify_tls=False,
            connection_timeout=10,
        )

    main = connect()
    extra: list[CosmosStores] = []

    def open_state() -> StateStore:
        # A second client, as a second starter process would have.
        extra.append(connect())
        return extra[-1].state

    def open_orders() -> OrderStore:
        extra.append(connect())
        return extra[-1].orders

    def stored_order(order_id: str) -> dict[str, Any]:
        doc = main.database.get_container_client("orders").read_item(item=order_id, partition_key=order_id)
        return {k: v for k, v in doc.items() if not k.startswith("_")}

    try:
        yield Stores("cosmos", main.state, main.orders, open_state, open_orders, stored_order)
    finally:
        for other in extra:
            other.close()
        main.client.delete_database(unique_name)
        main.close()


def stored(orders: InMemoryOrderStore, order_id: str) -> dict[str, Any]:
    """An in-memory order document exactly as the store keeps it (system properties dropped)."""
    doc = orders._container.read(order_id)
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def make_record(
    order_id: str,
    *,
    state: ProcessState = ProcessState.PENDING,
    locked_by: str | None = None,
    complete_by: datetime | None = None,
    next_attempt_at: datetime | None = None,
    **extra: Any,
) -> StateRecord:
    return StateRecord(
        id=order_id,
        order_id=order_id,
        process_state=state,
        locked_by=locked_by,
        complete_by=complete_by,
        next_attempt_at=next_attempt_at,
        reply_to=f"replies-{order_id}",
        retry_budget=RetryBudget(limit=10),
        workflow_version="order-v1",
        created_at=T0,
        updated_at=T0,
        client_id="a",
        **extra,
    )


def rich_record(order_id: str) -> StateRecord:
    """A record with every field set, nested steps, a compensation log and unknown extra fields."""
    return make_record(
        order_id,
        state=ProcessState.PROCESSING,
        locked_by=f"{order_id}:2",
        complete_by=T0 + timedelta(minutes=5, microseconds=7),
        next_attempt_at=T0 - timedelta(seconds=30),
        failure_count=1,
        attempt=2,
        steps={
            "reserve": StepState(
                status=StepStatus.COMPLETED,
                attempts=2,
                idempotency_key=f"{order_id}:reserve",
                last_instance=f"{order_id}:2",
                result={"reservationId": "res-42"},
                started_at=T0 - timedelta(seconds=3),
                completed_at=T0 - timedelta(seconds=1, microseconds=1),
            ),
            "charge": StepState(status=StepStatus.RUNNING, attempts=1, idempotency_key=f"{order_id}:charge"),
        },
        compensation_log=[
            CompensationEntry(
                step="reserve",
                action="reserve",
                undo="release",
                undo_key=f"{order_id}:reserve:undo",
                data={"reservationId": "res-42"},
                recorded_at=T0 - timedelta(seconds=1),
            )
        ],
        last_error=LastError(kind="transient", message="inventory 503", step="reserve", at=T0),
        priority="gold",
        channel={"name": "web", "tags": ["a", "b"], "weight": 1.5},
    )


def make_order(order_id: str, *, amount: str = "1234.50") -> OrderDocument:
    return OrderDocument(
        id=order_id,
        order_id=order_id,
        client_id="a",
        customer_id="c-7",
        customer_name="Zoë Ångström",
        currency="EUR",
        amount=Decimal(amount),
        items=(OrderItem(sku="SKU-1", quantity=2), OrderItem(sku="SKU-2", quantity=1)),
        carrier="dhl",
        reply_to=f"replies-{order_id}",
        content_hash="ab" * 32,
        received_at=T0,
        giftWrap=True,
    )


def claimed(record: StateRecord, owner: str) -> StateRecord:
    """The claim write of docs/design.md §3.2, as the starter makes it."""
    return record.model_copy(
        update={
            "process_state": ProcessState.PROCESSING,
            "locked_by": owner,
            "attempt": record.attempt + 1,
            "complete_by": T0 + timedelta(minutes=1),
        }
    )


def scan(
    store: StateStore, query: StateQuery, *, page_size: int = 100
) -> tuple[list[str], list[Page[Versioned[StateRecord]]]]:
    """Every id a full scan returns (in page order), and the pages; fails on a runaway scan."""
    pages: list[Page[Versioned[StateRecord]]] = []
    token: str | None = None
    while True:
        page = store.query(query, max_item_count=page_size, continuation=token)
        pages.append(page)
        assert len(page.items) <= page_size
        token = page.continuation
        if token is None:
            break
        assert len(pages) < 100, "scan did not terminate"
    return [v.item.id for page in pages for v in page.items], pages


# --- create / get -----------------------------------------------------------------------------


def test_state_round_trip_preserves_every_field(stores: Stores) -> None:
    record = rich_record("o-rich")

    created = stores.state.create(record)
    got = stores.state.get("o-rich")

    assert created.etag and got.etag == created.etag
    for versioned in (created, got):
        item = versioned.item
        assert item.to_json_dict() == record.to_json_dict()
        assert item.complete_by == T0 + timedelta(minutes=5, microseconds=7)
        assert item.complete_by is not None and item.complete_by.tzinfo is not None
        assert item.steps["reserve"].status is StepStatus.COMPLETED
        assert item.steps["reserve"].completed_at == T0 - timedelta(seconds=1, microseconds=1)
        assert item.steps["charge"].result is None
        assert item.compensation_log[0].undo_key == "o-rich:reserve:undo"
        assert item.last_error is not None and item.last_error.at == T0
        assert item.model_extra == {
            "priority": "gold",
            "channel": {"name": "web", "tags": ["a", "b"], "weight": 1.5},
        }


def test_order_round_trip_keeps_decimal_and_extra_fields(stores: Stores) -> None:
    stores.orders.create(make_order("o-1", amount="1234.50"))

    got = stores.orders.get("o-1")

    assert got == make_order("o-1", amount="1234.50")
    assert isinstance(got.amount, Decimal) and str(got.amount) == "1234.50"
    assert got.items[1] == OrderItem(sku="SKU-2", quantity=1)
    assert got.received_at == T0
    assert got.customer_name == "Zoë Ångström"
    assert got.model_extra == {"giftWrap": True}


def test_models_are_copied_in_and_out(stores: Stores) -> None:
    record = make_record("o-1", steps={"reserve": StepState(idempotency_key="o-1:reserve")})
    created = stores.state.create(record)

    # Mutating what was passed in or handed out must not reach the store.
    record.steps["reserve"].attempts = 99
    created.item.steps["reserve"].attempts = 98
    created.item.locked_by = "intruder"
    stores.state.get("o-1").item.compensation_log.append(
        CompensationEntry(step="x", action="x", undo=None, undo_key="x", recorded_at=T0)
    )

    fresh = stores.state.get("o-1")
    assert fresh.item.steps["reserve"].attempts == 0
    assert fresh.item.locked_by is None
    assert fresh.item.compensation_log == []
    assert fresh.etag == created.etag


def test_a_write_answers_with_the_record_written_and_the_etag_and_time_a_read_gives(
    stores: Stores,
) -> None:
    record = rich_record("o-1")
    created = stores.state.create(record)
    assert created == stores.state.get("o-1")
    assert created.stored_at == stores.state.get("o-1").stored_at is not None

    changed = claimed(created.item.copied(), "o-1:1")
    replaced = stores.state.replace(changed, etag=created.etag)
    got = stores.state.get("o-1")

    # The write result is the model handed over (writers change only copies of it), not a second parse.
    assert created.item is record and replaced.item is changed
    assert replaced == got and replaced.item.to_json_dict() == got.item.to_json_dict()
    assert replaced.stored_at == got.stored_at is not None


def test_duplicate_state_create_raises_and_keeps_the_original(stores: Stores) -> None:
    original = stores.state.create(make_record("o-1"))

    with pytest.raises(AlreadyExists):
        stores.state.create(make_record("o-1", state=ProcessState.ERROR, failure_count=5))

    got = stores.state.get("o-1")
    assert got.etag == original.etag
    assert got.item.process_state is ProcessState.PENDING
    assert got.item.failure_count == 0


def test_duplicate_order_create_raises_and_keeps_the_original(stores: Stores) -> None:
    stores.orders.create(make_order("o-1", amount="10.00"))

    with pytest.raises(AlreadyExists):
        stores.orders.create(make_order("o-1", amount="99.99"))

    assert stores.orders.get("o-1").amount == Decimal("10.00")


def test_get_of_a_missing_item_raises_not_found(stores: Stores) -> None:
    stores.state.create(make_record("o-1"))  # a neighbour exists; the container is not empty
    stores.orders.create(make_order("o-1"))

    with pytest.raises(NotFound):
        stores.state.get("o-missing")
    with pytest.raises(NotFound):
        stores.orders.get("o-missing")


def test_the_local_emulator_answers_a_read_of_a_missing_item_404_as_cosmos_db_does(
    local_endpoints: LocalEndpoints, unique_name: str
) -> None:
    # Not 500 (cosmosdb-server's own answer, corrected by devhost/cosmosdb_server.js): the SDK would
    # retry a 500 after 500 ms before the adapter's existence query.
    stores = CosmosStores.connect(
        local_endpoints.cosmos_endpoint,
        key=local_endpoints.cosmos_key,
        database=unique_name,
        verify_tls=False,
    )
    try:
        stores.state.create(make_record("o-1"))
        container = stores.database.get_container_client("orderstate")
        with pytest.raises(CosmosHttpResponseError) as raised:
            container.read_item(item="o-missing", partition_key="o-missing")
        assert raised.value.status_code == 404
        assert container.read_item(item="o-1", partition_key="o-1")["id"] == "o-1"
    finally:
        stores.client.delete_database(unique_name)
        stores.close()


def test_an_id_that_differs_from_the_order_id_is_refused(stores: Stores) -> None:
    with pytest.raises(ValueError, match="must equal orderId"):
        stores.state.create(make_record("o-1").model_copy(update={"id": "other"}))

    with pytest.raises(NotFound):
        stores.state.get("other")


# --- conditional replace ----------------------------------------------------------------------


def test_replace_with_the_current_etag_succeeds_with_a_new_etag(stores: Stores) -> None:
    v1 = stores.state.create(make_record("o-1"))

    v2 = stores.state.replace(claimed(v1.item, "o-1:1"), etag=v1.etag)

    assert v2.etag != v1.etag
    assert v2.item.locked_by == "o-1:1" and v2.item.attempt == 1
    got = stores.state.get("o-1")
    assert got.etag == v2.etag
    assert got.item.process_state is ProcessState.PROCESSING
    assert got.item.locked_by == "o-1:1"
    # The new ETag is itself usable for the next conditional write.
    v3 = stores.state.replace(got.item.model_copy(update={"failure_count": 1}), etag=got.etag)
    assert v3.etag not in (v1.etag, v2.etag)
    assert stores.state.get("o-1").item.failure_count == 1


def test_replace_with_a_stale_etag_conflicts_and_changes_nothing(stores: Stores) -> None:
    v1 = stores.state.create(make_record("o-1"))
    v2 = stores.state.replace(claimed(v1.item, "o-1:1"), etag=v1.etag)

    with pytest.raises(ConcurrencyConflict):
        stores.state.replace(claimed(v1.item, "o-1:9"), etag=v1.etag)

    got = stores.state.get("o-1")
    assert got.etag == v2.etag
    assert got.item.locked_by == "o-1:1"


def test_replace_with_the_etag_of_another_record_conflicts(stores: Stores) -> None:
    a = stores.state.create(make_record("o-a"))
    b = stores.state.create(make_record("o-b"))

    with pytest.raises(ConcurrencyConflict):
        stores.state.replace(claimed(b.item, "o-b:1"), etag=a.etag)

    assert stores.state.get("o-b").etag == b.etag


def test_replace_of_a_missing_record_raises_not_found(stores: Stores) -> None:
    existing = stores.state.create(make_record("o-1"))

    with pytest.raises(NotFound):
        stores.state.replace(make_record("o-missing"), etag=existing.etag)

    with pytest.raises(NotFound):
        stores.state.get("o-missing")


def test_two_racing_claims_of_the_same_record_exactly_one_wins(stores: Stores) -> None:
    order_ids = [f"o-race-{n:02d}" for n in range(20)]
    for order_id in order_ids:
        stores.state.create(make_record(order_id))
    handles = [stores.open_state(), stores.open_state()]
    barrier = threading.Barrier(2, timeout=30)
    outcomes: dict[tuple[int, str], str] = {}
    read_etags: dict[tuple[int, str], str] = {}
    failures: list[BaseException] = []

    def starter(n: int) -> None:
        store = handles[n]
        try:
            for order_id in order_ids:
                current = store.get(order_id)
                read_etags[n, order_id] = current.etag
                barrier.wait()  # both have read the same ETag; now both try to claim
                try:
                    store.replace(claimed(current.item, f"{order_id}:starter{n}"), etag=current.etag)
                    outcomes[n, order_id] = "won"
                except ConcurrencyConflict:
                    outcomes[n, order_id] = "conflict"
                barrier.wait()  # nobody reads the next record before both writes are done
        except BaseException as exc:  # reported in the main thread
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=starter, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures

    for order_id in order_ids:
        assert read_etags[0, order_id] == read_etags[1, order_id]
        results = sorted([outcomes[0, order_id], outcomes[1, order_id]])
        assert results == ["conflict", "won"], order_id
        winner = 0 if outcomes[0, order_id] == "won" else 1
        final = stores.state.get(order_id).item
        assert final.locked_by == f"{order_id}:starter{winner}"
        assert final.attempt == 1


# --- queries ----------------------------------------------------------------------------------

DATA_SET: dict[str, dict[str, Any]] = {
    "p-free-null": {"state": ProcessState.PENDING},
    "p-free-past": {"state": ProcessState.PENDING, "next_attempt_at": T0 - timedelta(minutes=1)},
    "p-free-now": {"state": ProcessState.PENDING, "next_attempt_at": T0},
    "p-free-future": {"state": ProcessState.PENDING, "next_attempt_at": T0 + timedelta(microseconds=1)},
    "p-locked": {"state": ProcessState.PENDING, "locked_by": "p-locked:1"},
    "run-expired": {
        "state": ProcessState.PROCESSING,
        "locked_by": "run-expired:1",
        "complete_by": T0 - timedelta(minutes=5),
    },
    "run-edge": {"state": ProcessState.PROCESSING, "locked_by": "run-edge:1", "complete_by": T0},
    "run-live": {
        "state": ProcessState.PROCESSING,
        "locked_by": "run-live:1",
        "complete_by": T0 + timedelta(minutes=5),
    },
    "run-nodeadline": {"state": ProcessState.PROCESSING, "locked_by": "run-nodeadline:1"},
    "comp-expired": {
        "state": ProcessState.COMPENSATING,
        "locked_by": "comp-expired:3",
        "complete_by": T0 - timedelta(hours=1),
    },
    "done": {"state": ProcessState.PROCESSED},
}

QUERY_CASES = [
    pytest.param(StateQuery(), set(DATA_SET), id="everything"),
    pytest.param(
        StateQuery(process_states=[ProcessState.PROCESSING]),
        {"run-expired", "run-edge", "run-live", "run-nodeadline"},
        id="one-state",
    ),
    pytest.param(
        StateQuery(process_states=[ProcessState.COMPENSATING, ProcessState.PENDING, ProcessState.PENDING]),
        {"p-free-null", "p-free-past", "p-free-now", "p-free-future", "p-locked", "comp-expired"},
        id="two-states",
    ),
    pytest.param(
        StateQuery(unlocked=True),
        {"p-free-null", "p-free-past", "p-free-now", "p-free-future", "done"},
        id="unlocked",
    ),
    pytest.param(StateQuery(ready_at=T0), set(DATA_SET) - {"p-free-future"}, id="ready-at"),
    pytest.param(StateQuery(complete_by_before=T0), {"run-expired", "comp-expired"}, id="before"),
    pytest.param(StateQuery(complete_by_after=T0), {"run-edge", "run-live"}, id="after"),
    pytest.param(
        StateQuery(process_states=[ProcessState.PENDING], unlocked=True, ready_at=T0),
        {"p-free-null", "p-free-past", "p-free-now"},
        id="starter",
    ),
    pytest.param(
        StateQuery(process_states=[ProcessState.PENDING], unlocked=True, ready_at=T0.astimezone(PLUS_TWO)),
        {"p-free-null", "p-free-past", "p-free-now"},
        id="starter-other-timezone",
    ),
    pytest.param(
        StateQuery(process_states=[ProcessState.PENDING], unlocked=True, ready_at=T0 - timedelta(hours=1)),
        {"p-free-null"},
        id="starter-early",
    ),
    pytest.param(
        StateQuery(process_states=[ProcessState.PROCESSING], complete_by_before=T0),
        {"run-expired"},
        id="supervisor",
    ),
    pytest.param(
        StateQuery(
            process_states=[ProcessState.PROCESSING, ProcessState.COMPENSATING],
            complete_by_after=T0 - timedelta(minutes=10),
            complete_by_before=T0,
        ),
        {"run-expired"},
        id="window",
    ),
    pytest.param(
        StateQuery(complete_by_after=T0 - timedelta(hours=2), complete_by_before=T0 + timedelta(hours=1)),
        {"run-expired", "run-edge", "run-live", "comp-expired"},
        id="wide-window",
    ),
    pytest.param(StateQuery(process_states=[ProcessState.CANCELLED]), set(), id="no-match"),
]


@pytest.fixture
def seeded(stores: Stores) -> Stores:
    for order_id, fields in DATA_SET.items():
        stores.state.create(make_record(order_id, **fields))
    return stores


@pytest.mark.parametrize(("query", "expected"), QUERY_CASES)
def test_query_and_count_select_exactly_the_matching_records(
    seeded: Stores, query: StateQuery, expected: set[str]
) -> None:
    ids, pages = scan(seeded.state, query, page_size=4)

    assert sorted(ids) == sorted(expected)
    assert len(ids) == len(set(ids))
    assert pages[-1].continuation is None
    assert seeded.state.count(query) == len(expected)
    for page in pages:
        for versioned in page.items:
            # Query results carry the same ETag and content as a point read.
            assert versioned == seeded.state.get(versioned.item.id)


def test_paging_returns_every_record_exactly_once(stores: Stores) -> None:
    wanted = {f"o-{n:03d}" for n in range(25)}
    for order_id in sorted(wanted):
        stores.state.create(make_record(order_id))
    for n in range(5):
        stores.state.create(make_record(f"o-done-{n}", state=ProcessState.PROCESSED))
    query = StateQuery(process_states=[ProcessState.PENDING])
    ids, pages = scan(stores.state, query, page_size=7)

    assert len(ids) == 25 and set(ids) == wanted
    assert pages[-1].continuation is None
    assert all(page.continuation is not None for page in pages[:-1])
    assert len(pages) >= 4  # 25 items, at most 7 a page


@pytest.mark.parametrize(
    "token",
    ["garbage", "", "mem1.!!!", "cos1.e30=", '{"token":"+RID:x#RT:1#TRC:2","range":{"min":"","max":"FF"}}'],
)
def test_a_garbage_continuation_token_is_invalid(stores: Stores, token: str) -> None:
    stores.state.create(make_record("o-1"))

    with pytest.raises(InvalidContinuation):
        stores.state.query(StateQuery(), max_item_count=5, continuation=token)


def test_a_token_from_another_query_is_invalid(stores: Stores) -> None:
    for n in range(6):
        stores.state.create(make_record(f"o-{n}"))
    first = stores.state.query(StateQuery(process_states=[ProcessState.PENDING]), max_item_count=2)
    assert first.continuation is not None

    with pytest.raises(InvalidContinuation):
        stores.state.query(StateQuery(unlocked=True), max_item_count=2, continuation=first.continuation)
    with pytest.raises(InvalidContinuation):
        stores.state.query(
            StateQuery(process_states=[ProcessState.PENDING], ready_at=T0),
            max_item_count=2,
            continuation=first.continuation,
        )
    # The same query (even with its states in another order) resumes with it.
    second = stores.state.query(
        StateQuery(process_states=(ProcessState.PENDING, ProcessState.PENDING)),
        max_item_count=2,
        continuation=first.continuation,
    )
    assert len(second.items) == 2
    assert {v.item.id for v in second.items}.isdisjoint({v.item.id for v in first.items})


def test_a_tampered_token_is_invalid(stores: Stores) -> None:
    for n in range(4):
        stores.state.create(make_record(f"o-{n}"))
    token = stores.state.query(StateQuery(), max_item_count=1).continuation
    assert token is not None

    for bad in (token[:-4], token + "AAAA", token.replace(token[-6], "*")):
        with pytest.raises(InvalidContinuation):
            stores.state.query(StateQuery(), max_item_count=1, continuation=bad)


@pytest.mark.integration
def test_cosmos_rejection_of_a_server_token_is_invalid_continuation(
    local_endpoints: LocalEndpoints, unique_name: str
) -> None:
    # White-box: keep our envelope intact but garble the server's token inside it; cosmosdb-server
    # answers 400, which must surface as InvalidContinuation (restart the scan), not a crash.
    with CosmosStores.connect(
        local_endpoints.cosmos_endpoint,
        key=local_endpoints.cosmos_key,
        database=unique_name,
        verify_tls=False,
    ) as cosmos:
        try:
            for n in range(4):
                cosmos.state.create(make_record(f"o-{n}"))
            token = cosmos.state.query(StateQuery(), max_item_count=1).continuation
            assert token is not None and token.startswith("cos1.")
            payload = json.loads(base64.urlsafe_b64decode(token[len("cos1.") :]))
            payload["p"] = "{}"
            garbled = "cos1." + base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()

            with pytest.raises(InvalidContinuation, match="rejected"):
                cosmos.state.query(StateQuery(), max_item_count=1, continuation=garbled)
        finally:
            cosmos.client.delete_database(unique_name)


def test_max_item_count_must_be_positive(stores: Stores) -> None:
    with pytest.raises(ValueError, match="max_item_count"):
        stores.state.query(StateQuery(), max_item_count=0)


def test_query_by_pending_reply_and_update_time(stores: Stores) -> None:
    owed = PendingReply(status="Processed")
    stores.state.create(make_record("owed-old", state=ProcessState.PROCESSED, pending_reply=owed))
    late = make_record("owed-new", state=ProcessState.PROCESSED, pending_reply=owed)
    late.updated_at = T0 + timedelta(minutes=10)
    stores.state.create(late)
    stores.state.create(make_record("replied", state=ProcessState.PROCESSED))

    pending, _ = scan(stores.state, StateQuery(reply_pending=True))
    assert sorted(pending) == ["owed-new", "owed-old"]
    stale, _ = scan(stores.state, StateQuery(reply_pending=True, updated_before=T0 + timedelta(minutes=5)))
    assert stale == ["owed-old"]
    assert stores.state.count(StateQuery(reply_pending=True)) == 2


def test_purge_version_below_finds_records_that_version_has_not_purged(stores: Stores) -> None:
    finished = ProcessState.PROCESSED
    stores.state.create(make_record("never", state=finished))
    stores.state.create(make_record("v1", state=finished, data_purged_at=T0, data_purge_version=1))
    stores.state.create(make_record("v2", state=finished, data_purged_at=T0, data_purge_version=2))
    stores.state.create(make_record("new", state=ProcessState.PENDING))

    found, _ = scan(stores.state, StateQuery(process_states=(finished,), purge_version_below=2))
    assert sorted(found) == ["never", "v1"]
    assert stores.state.count(StateQuery(purge_version_below=2)) == 3
    assert stores.state.count(StateQuery(purge_version_below=3)) == 4


# --- order redaction --------------------------------------------------------------------------


def test_redaction_replaces_customer_and_payment_data_and_keeps_keys_and_hash(stores: Stores) -> None:
    original = make_order("o-1", amount="1234.50")
    stores.orders.create(original)
    at = T0 + timedelta(days=30)

    assert stores.orders.redact("o-1", at=at) is Redaction.REDACTED

    got = stores.orders.get("o-1")
    assert (got.customer_id, got.customer_name, got.carrier, got.amount, got.items) == (
        REDACTED,
        REDACTED,
        REDACTED,
        Decimal(0),
        (),
    )
    assert got.redacted_at == at
    kept = (
        "id",
        "order_id",
        "currency",
        "reply_to",
        "content_hash",
        "received_at",
        "schema_version",
    )
    assert {name: getattr(got, name) for name in kept} == {name: getattr(original, name) for name in kept}
    # A field of a newer schema is not known to hold no personal data: it goes too.
    assert got.model_extra == {}
    text = json.dumps(stores.stored_order("o-1"), ensure_ascii=False)
    for secret in ("c-7", "Zoë Ångström", "dhl", "1234.5", "SKU-1", "SKU-2", "giftWrap"):
        assert secret not in text


def test_a_second_redaction_writes_nothing(stores: Stores) -> None:
    stores.orders.create(make_order("o-1"))
    stores.orders.redact("o-1", at=T0)
    first = stores.stored_order("o-1")

    assert stores.orders.redact("o-1", at=T0 + timedelta(days=1)) is Redaction.ALREADY_REDACTED

    assert stores.stored_order("o-1") == first
    assert stores.orders.get("o-1").redacted_at == T0


def test_redaction_of_a_missing_order_raises_not_found(stores: Stores) -> None:
    stores.orders.create(make_order("o-1"))

    with pytest.raises(NotFound):
        stores.orders.redact("o-missing", at=T0)
    assert stores.orders.get("o-1").customer_id == "c-7"


def test_a_redaction_that_loses_the_race_raises_and_leaves_the_winners(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores.orders.create(make_order("o-1"))
    other = stores.open_orders()
    # Both adapters read through their container; another pass redacts between this read and write.
    container = stores.orders._container  # type: ignore[attr-defined]
    read = container.read

    def read_then_lose(item_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = read(item_id)
        monkeypatch.setattr(container, "read", read)
        other.redact(item_id, at=T0)
        return doc

    monkeypatch.setattr(container, "read", read_then_lose)

    with pytest.raises(ConcurrencyConflict):
        stores.orders.redact("o-1", at=T0 + timedelta(minutes=1))
    assert stores.orders.get("o-1").redacted_at == T0
    assert stores.orders.redact("o-1", at=T0 + timedelta(minutes=2)) is Redaction.ALREADY_REDACTED


def _with_entries(record: StateRecord, entries: int) -> StateRecord:
    for _ in range(entries):
        before = record.model_copy(deep=True)
        record.updated_at = record.updated_at + timedelta(seconds=1)
        note(before, record, Actor("operator", "tenant/oid"), action="inspect")
    return record


def test_a_timeline_past_its_window_moves_to_history_once_and_pages_back(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = stores.state.create(_with_entries(make_record("a:t-1"), TIMELINE_WINDOW))
    loser = stores.open_state()
    handles = {id(store): store for store in (stores.state, loser)}.values()
    moved: list[str] = []  # the order id of each chunk a writer appends to the history container
    for store in handles:
        history = store._history  # type: ignore[attr-defined]
        append = history.create

        def counted(doc: dict[str, Any], append: Any = append) -> Any:
            moved.append(doc["orderId"])
            return append(doc)

        monkeypatch.setattr(history, "create", counted)
    written = stores.state.replace(_with_entries(found.item.model_copy(deep=True), 1), etag=found.etag)
    # A second writer on the version the first replaced moves the same entries, then loses.
    with pytest.raises(ConcurrencyConflict):
        loser.replace(_with_entries(found.item.model_copy(deep=True), 1), etag=found.etag)
    for _ in range(2):
        current = stores.state.get("a:t-1")
        need = TIMELINE_WINDOW + 1 - len(current.item.timeline)
        written = stores.state.replace(
            _with_entries(current.item.model_copy(deep=True), need), etag=current.etag
        )

    first = stores.state.history("a:t-1", max_item_count=2)
    rest = stores.state.history("a:t-1", max_item_count=2, continuation=first.continuation)

    chunks = [*first.items, *rest.items]
    assert first.continuation is not None and rest.continuation is None
    assert [(c.first_seq, c.last_seq) for c in chunks] == [(1, 17), (18, 34), (35, 51)]
    assert [e.seq for e in merged(chunks, written.item)] == list(range(1, written.item.timeline_seq + 1))
    assert len(written.item.timeline) == TIMELINE_KEEP
    # One chunk per overflowing write, the losing one's included.
    assert moved == ["a:t-1"] * 4
    assert stores.state.history("a:t-2", max_item_count=5) == Page([], None)
