"""Model-based checks of the in-memory state store's ETag semantics, and its id-ordered paging.

Several logical writers interleave reads and read-modify-write increments on two records. A tiny
model predicts every outcome: a write succeeds exactly when the writer's ETag came from the record's
current version. If the store ever let a stale (or foreign) ETag through, an increment would be lost
and the stored counter would disagree with the number of successful writes.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orderflow.errors import ConcurrencyConflict
from orderflow.records import ProcessState, RetryBudget, StateRecord
from orderflow.stores import memory
from orderflow.stores.base import StateQuery
from orderflow.stores.memory import InMemoryStateStore

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RECORDS = ("o-1", "o-2")
WRITERS = 3


def make_record(order_id: str) -> StateRecord:
    return StateRecord(
        id=order_id,
        order_id=order_id,
        client_id="a",
        reply_to="replies",
        retry_budget=RetryBudget(limit=10),
        workflow_version="order-v1",
        created_at=T0,
        updated_at=T0,
    )


# (writer, action, target record, record whose ETag the writer presents)
operations = st.lists(
    st.tuples(
        st.integers(0, WRITERS - 1),
        st.sampled_from(["read", "write"]),
        st.sampled_from(RECORDS),
        st.sampled_from(RECORDS),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_a_stale_or_foreign_etag_never_wins(ops: list[tuple[int, str, str, str]]) -> None:
    store = InMemoryStateStore()
    version = dict.fromkeys(RECORDS, 0)  # model: successful writes per record
    held: dict[tuple[int, str], tuple[str, StateRecord, int]] = {}  # (etag, record, version) read
    for order_id in RECORDS:
        created = store.create(make_record(order_id))
        for writer in range(WRITERS):
            held[writer, order_id] = (created.etag, created.item, 0)

    for writer, action, target, etag_of in ops:
        if action == "read":
            current = store.get(target)
            assert current.item.failure_count == version[target]
            held[writer, target] = (current.etag, current.item, version[target])
            continue
        etag, _, seen = held[writer, etag_of]
        _, base, _ = held[writer, target]
        # A read-modify-write increment based on what this writer last read of the target.
        update = base.model_copy(update={"failure_count": base.failure_count + 1})
        expect_success = etag_of == target and seen == version[target]
        try:
            written = store.replace(update, etag=etag)
        except ConcurrencyConflict:
            assert not expect_success, "a current ETag was refused"
        else:
            assert expect_success, "a stale or foreign ETag was accepted"
            version[target] += 1
            held[writer, target] = (written.etag, written.item, version[target])

        for order_id in RECORDS:
            assert store.get(order_id).item.failure_count == version[order_id]


@settings(max_examples=50, deadline=None)
@given(
    st.sets(st.text("abcxyz-0123", min_size=1, max_size=6), min_size=0, max_size=30),
    st.integers(1, 8),
)
def test_pages_come_in_id_order_without_gaps(ids: set[str], page_size: int) -> None:
    store = InMemoryStateStore()
    for order_id in ids:
        store.create(make_record(order_id).model_copy(update={"process_state": ProcessState.PENDING}))

    seen: list[str] = []
    token: str | None = None
    while True:
        page = store.query(StateQuery(), max_item_count=page_size, continuation=token)
        assert len(page.items) <= page_size
        seen += [v.item.id for v in page.items]
        token = page.continuation
        if token is None:
            break
        assert page.items, "the in-memory store never returns an empty page with a token"

    assert seen == sorted(ids)


STATES = (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.PROCESSED, ProcessState.ERROR)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(("a", "b", "c", "d")), st.sampled_from(STATES)), max_size=40),
    st.lists(st.sampled_from(STATES), min_size=1, max_size=3, unique=True),
)
def test_a_query_by_state_finds_exactly_the_records_now_in_those_states(
    moves: list[tuple[str, ProcessState]], wanted: list[ProcessState]
) -> None:
    # The store looks a state query up in its processState index: moving records between states must
    # leave every record findable under its current state, and under no other.
    store = InMemoryStateStore()
    current: dict[str, ProcessState] = {}
    for order_id, state in moves:
        record = make_record(order_id).model_copy(update={"process_state": state})
        if order_id in current:
            store.replace(record, etag=store.get(order_id).etag)
        else:
            store.create(record)
        current[order_id] = state

    page = store.query(StateQuery(process_states=wanted), max_item_count=100)

    assert [v.item.id for v in page.items] == sorted(i for i, s in current.items() if s in wanted)
    assert store.count(StateQuery(process_states=wanted)) == len(page.items)


def test_a_state_query_reads_only_the_records_in_those_states(monkeypatch: pytest.MonkeyPatch) -> None:
    store = InMemoryStateStore()
    for n in range(200):
        store.create(
            make_record(f"settled-{n:03}").model_copy(update={"process_state": ProcessState.PROCESSED})
        )
    store.create(make_record("live").model_copy(update={"process_state": ProcessState.PROCESSING}))
    parsed: list[str] = []
    real_matches = memory.matches

    def counting_matches(query: StateQuery, doc: dict[str, object]) -> bool:
        parsed.append(str(doc["id"]))
        return real_matches(query, doc)

    monkeypatch.setattr(memory.state, "matches", counting_matches)
    page = store.query(StateQuery(process_states=[ProcessState.PROCESSING]), max_item_count=10)

    assert [v.item.id for v in page.items] == ["live"]
    assert parsed == ["live"]  # the 200 settled records were never looked at


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic's warning on serialising the wrong type
def test_a_write_whose_record_a_read_would_coerce_is_refused_and_stores_nothing() -> None:
    # The Cosmos DB store answers a write with the record it was handed (no second parse): this store
    # checks that shortcut on every write, so a record that only a read would repair fails here.
    store = InMemoryStateStore()
    record = make_record("o-1")
    record.attempt = "3"  # type: ignore[assignment]

    with pytest.raises(RuntimeError, match="o-1: the record written is not what a read returns"):
        store.create(record)

    created = store.create(make_record("o-2"))
    wrong = created.item.copied()
    wrong.failure_count = 2.0  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match=r"'failure_count': 2\.0"):
        store.replace(wrong, etag=created.etag)
    assert store.get("o-2") == created
