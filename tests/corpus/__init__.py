"""orderflow's bad-input corpus, and a run of it through the local host's submission consumer.

The cases are data: one raw message body per file in this directory, each described in ``manifest.toml``
(the dead-letter reason it must get, why it is bad, which transports can carry it). :func:`load_cases`
reads them; :func:`run_through_devhost` feeds them, interleaved with valid orders, through a
:class:`~devhost.host.DevHost` running the submission role, and :func:`problems` lists every way the
outcome falls short of orderflow's promises for bad input:

- each case is dead-lettered on the ``orders`` dead-letter queue with exactly its reason, a description
  and its original body;
- nothing is written for it: no order document, no state record (a conflicting duplicate leaves the
  first order exactly as it was);
- the valid orders around it are accepted (both records, a ``Received`` reply);
- the consumer keeps running (an order sent after the whole corpus is accepted too).
"""

from __future__ import annotations

import json
import re
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from orderflow.errors import InvalidMessage, NotFound
from orderflow.messages import MAX_MESSAGE_BYTES, StatusReply, parse_message, validate_order_id
from orderflow.queues.base import DeadLetter, QueueFactory, dead_letter_queue_name
from orderflow.records import OrderDocument, StateRecord, TimelineChunk, client_order_id, order_key
from orderflow.settings import Settings
from orderflow.stores.base import OrderStore, Page, Redaction, StateQuery, StateStore, Versioned
from tests.dev_host import dev_host
from tests.host_deps import HostDeps

CORPUS_DIR = Path(__file__).parent
MANIFEST = CORPUS_DIR / "manifest.toml"
STORAGE = "storage"
"""Transport: Storage queues (Azurite, the devhost); no message properties, 64 KiB per message."""
SERVICE_BUS = "servicebus"
"""Transport: Service Bus (the Functions trigger); a ``ReplyTo`` property, 256 KiB per message."""
REPLY_QUEUE = "client-a"
"""The reply queue every case and every valid order names: the registered reply queue of :data:`CLIENT`."""
CLIENTS = json.dumps([{"id": "a", "replyQueue": REPLY_QUEUE}])
"""The ``CLIENTS`` setting the corpus runs under: one client, ``a``, whose inbound queue every case is
sent to (the Functions app under test registers the same one, ``tests/conftest.py``)."""
CLIENT = Settings.load(env={}, CLIENTS=CLIENTS).clients.client("a")
"""The registered client every case arrives for."""

_ORDER_ID_IN_TEXT = re.compile(r'"orderId"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _oversized() -> bytes:
    """A valid order followed by insignificant whitespace past :data:`MAX_MESSAGE_BYTES`: only its size is
    wrong with it."""
    order = {
        "schemaVersion": 1,
        "orderId": "bad-oversized-body",
        "customerId": "42",
        "customerName": "Customer#000000042",
        "currency": "USD",
        "amount": "250.00",
        "items": [{"sku": "1552", "quantity": 2}],
        "carrier": "TRUCK",
        "replyTo": REPLY_QUEUE,
    }
    text = json.dumps(order).encode()
    return text + b" " * (MAX_MESSAGE_BYTES + 1 - len(text))


GENERATORS: dict[str, Callable[[], bytes]] = {"oversized": _oversized}
"""Bodies the manifest names with ``generate`` instead of ``file``: too large to keep as files."""


@dataclass(frozen=True)
class Case:
    """One bad message.

    Attributes:
        name: The manifest table's name (the file's stem).
        body: The raw body, bytes exactly as sent.
        reason: The dead-letter reason it must get.
        why: What is wrong with it, in one line.
        transports: :data:`STORAGE` and/or :data:`SERVICE_BUS`.
        transport_reply_to: The Service Bus ``ReplyTo`` property to send it with, if any.
        original: A body submitted (and accepted) before this one, which this one conflicts with.
    """

    name: str
    body: bytes
    reason: str
    why: str
    transports: frozenset[str]
    transport_reply_to: str | None = None
    original: bytes | None = None

    @property
    def text(self) -> str:
        """The body as a text transport carries it: bytes that are not UTF-8 kept as lone surrogates
        (``surrogateescape``), as orderflow's Service Bus adapter decodes them."""
        return self.body.decode("utf-8", errors="surrogateescape")

    def order_ids(self) -> set[str]:
        """Every ``orderId`` string the body mentions that could name a record, parseable or not."""
        ids = set()
        for match in _ORDER_ID_IN_TEXT.finditer(self.text):
            try:
                ids.add(validate_order_id(json.loads(f'"{match.group(1)}"')))
            except (InvalidMessage, ValueError):
                continue  # not an order id: nothing can be stored under it
        return ids


def manifest() -> dict[str, dict[str, object]]:
    """The manifest's tables, by case name, in file order."""
    with MANIFEST.open("rb") as file:
        return tomllib.load(file)


def case_files() -> set[str]:
    """The data files in the corpus directory (everything but the manifest and Python code)."""
    return {
        path.name
        for path in CORPUS_DIR.iterdir()
        if path.is_file() and path.name != MANIFEST.name and path.suffix not in {".py", ".pyc"}
    }


def load_cases() -> list[Case]:
    """Every case of the manifest, bodies read (or generated).

    Raises:
        KeyError / FileNotFoundError: the manifest names a generator or file that does not exist.
    """
    cases = []
    for name, entry in manifest().items():
        generate = entry.get("generate")
        body = GENERATORS[str(generate)]() if generate else (CORPUS_DIR / str(entry["file"])).read_bytes()
        original = entry.get("original")
        reply_to = entry.get("transport_reply_to")
        transports = entry.get("transports", [STORAGE, SERVICE_BUS])
        assert isinstance(transports, list)
        cases.append(
            Case(
                name=name,
                body=body,
                reason=str(entry["reason"]),
                why=str(entry["why"]),
                transports=frozenset(str(t) for t in transports),
                transport_reply_to=None if reply_to is None else str(reply_to),
                original=None if original is None else (CORPUS_DIR / str(original)).read_bytes(),
            )
        )
    return cases


_VALID_VARIANTS: tuple[dict[str, object], ...] = (
    {},
    {"customerName": "Zoë Ñúñez-Øster 🍕 北京"},  # text outside ASCII is fine; invisible text is not
    {"amount": 250},  # a JSON integer
    {"amount": 12.5},  # a JSON number, read exactly
    {"items": [{"sku": "1552", "quantity": 10_000}]},
    {"items": [{"sku": f"sku-{n}", "quantity": 1} for n in range(100)]},
    {"currency": "GBP", "carrier": "REG AIR", "amount": "999999999.99"},
)


def valid_order(order_id: str, variant: int) -> bytes:
    """A valid order body (one of a few shapes near the limits, chosen by ``variant``)."""
    body: dict[str, object] = {
        "schemaVersion": 1,
        "orderId": order_id,
        "customerId": "7",
        "customerName": "Customer#000000007",
        "currency": "EUR",
        "amount": "19.99",
        "items": [{"sku": "1552", "quantity": 1}],
        "carrier": "MAIL",
        "replyTo": REPLY_QUEUE,
    }
    body.update(_VALID_VARIANTS[variant % len(_VALID_VARIANTS)])
    return json.dumps(body, ensure_ascii=False).encode()


class RecordingOrderStore:
    """An :class:`~orderflow.stores.base.OrderStore` that logs the order id of every document it created."""

    def __init__(self, inner: OrderStore, written: list[str]) -> None:
        self._inner = inner
        self.written = written

    def create(self, document: OrderDocument) -> None:
        """Create, then log."""
        self._inner.create(document)
        self.written.append(document.order_id)

    def get(self, order_id: str) -> OrderDocument:
        """Read."""
        return self._inner.get(order_id)

    def redact(self, order_id: str, *, at: datetime) -> Redaction:
        """Redact, then log."""
        done = self._inner.redact(order_id, at=at)
        self.written.append(order_id)
        return done


class RecordingStateStore:
    """A :class:`~orderflow.stores.base.StateStore` that logs the order id of every record it created or
    replaced."""

    def __init__(self, inner: StateStore, written: list[str]) -> None:
        self._inner = inner
        self.written = written

    def create(self, record: StateRecord) -> Versioned[StateRecord]:
        """Create, then log."""
        created = self._inner.create(record)
        self.written.append(record.order_id)
        return created

    def get(self, order_id: str) -> Versioned[StateRecord]:
        """Read."""
        return self._inner.get(order_id)

    def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        """Replace, then log."""
        replaced = self._inner.replace(record, etag=etag)
        self.written.append(record.order_id)
        return replaced

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        """Query."""
        return self._inner.query(query, max_item_count=max_item_count, continuation=continuation)

    def count(self, query: StateQuery) -> int:
        """Count."""
        return self._inner.count(query)

    def history(
        self, order_id: str, *, max_item_count: int, continuation: str | None = None
    ) -> Page[TimelineChunk]:
        """The inner store's timeline history."""
        return self._inner.history(order_id, max_item_count=max_item_count, continuation=continuation)


@dataclass
class CorpusRun:
    """What a run of the corpus left behind.

    Attributes:
        run_id: Prefix of every message id of this run.
        cases: The cases sent.
        valid_ids: Ids of the valid orders sent (all must be accepted), the last one after the corpus.
        dead_letters: Dead letters of this run's messages, by message id.
        replies: Statuses on the reply queue, by order id.
        originals: For each conflicting case, the first order's document and state record as they were
            before the conflicting message was sent.
        written_orders / written_states: The order id of every write to the order store (creates) and
            the state store (creates and replaces), through :meth:`recording`.
    """

    run_id: str
    cases: list[Case]
    valid_ids: list[str] = field(default_factory=list)
    dead_letters: dict[str, DeadLetter] = field(default_factory=dict)
    replies: dict[str, list[str]] = field(default_factory=dict)
    originals: dict[str, tuple[OrderDocument, Versioned[StateRecord]]] = field(default_factory=dict)
    written_orders: list[str] = field(default_factory=list)
    written_states: list[str] = field(default_factory=list)

    def recording(
        self, states: StateStore, orders: OrderStore
    ) -> tuple[RecordingStateStore, RecordingOrderStore]:
        """``states`` and ``orders`` with every write logged in :attr:`written_states` and
        :attr:`written_orders`: a bad message must write nothing, whatever order id it names."""
        return RecordingStateStore(states, self.written_states), RecordingOrderStore(
            orders, self.written_orders
        )

    @property
    def kept_ids(self) -> set[str]:
        """Order ids of the conflicting cases' first orders, which were accepted and must stay."""
        return {order_id for case in self.cases if case.original for order_id in case.order_ids()}

    def message_id(self, case: Case) -> str:
        """The message id a case is sent with."""
        return f"{self.run_id}-{case.name}"

    def new_valid_order(self) -> tuple[str, bytes]:
        """The id and body of the next valid order to send (recorded in :attr:`valid_ids`)."""
        order_id = f"ok-{self.run_id}-{len(self.valid_ids):03d}"
        body = valid_order(order_id, len(self.valid_ids))
        self.valid_ids.append(order_id)
        return order_id, body

    def keep_originals(self, deps: HostDeps) -> None:
        """Remember the first orders of the conflicting cases as they are now (after they were accepted)."""
        for case in self.cases:
            if case.original is not None:
                for order_id in case.order_ids():
                    key = order_key(CLIENT.client_id, order_id)
                    self.originals[case.name] = (deps.orders.get(key), deps.states.get(key))


def _chunks(cases: list[Case], size: int) -> Iterator[list[Case]]:
    for start in range(0, len(cases), size):
        yield cases[start : start + size]


def _wait_until_empty(queues: QueueFactory, name: str, *, timeout_s: float) -> None:
    """Wait until every message on ``name`` was settled (visible or locked, none is left)."""
    queue = queues.queue(name)
    deadline = time.monotonic() + timeout_s
    while queue.approximate_count() > 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"{queue.approximate_count()} messages still on {name} after {timeout_s} s")
        time.sleep(0.02)


def _take_dead_letters(queues: QueueFactory, name: str, run: CorpusRun) -> None:
    """Record this run's dead letters of ``name``, then empty its dead-letter queue for the next chunk.

    A peek shows at most 32 messages, so a run sends at most that many bad messages between two calls.
    """
    for dead in queues.dead_letters(name, max_messages=32):
        if dead.message_id.startswith(run.run_id):
            run.dead_letters[dead.message_id] = dead
    dead_letter_queue = queues.queue(dead_letter_queue_name(name))
    while batch := dead_letter_queue.receive(max_messages=32, lock_s=60):
        for message in batch:
            dead_letter_queue.complete(message)


def take_replies(queues: QueueFactory, run: CorpusRun) -> None:
    """Read (and remove) every status reply on :data:`REPLY_QUEUE` into ``run.replies``."""
    queue = queues.queue(REPLY_QUEUE)
    while batch := queue.receive(max_messages=32, lock_s=60):
        for message in batch:
            reply = parse_message(StatusReply, message.body)
            run.replies.setdefault(reply.order_id, []).append(reply.status.value)
            queue.complete(message)


def run_through_devhost(
    deps: HostDeps,
    cases: list[Case],
    *,
    run_id: str,
    chunk_size: int = 16,
    timeout_s: float = 15.0,
) -> CorpusRun:
    """Send every case that a Storage queue can carry to the inbound queue of :data:`CLIENT`, each between
    two valid orders, and let a :class:`DevHost` running only the submission role consume them (with
    ``deps.settings`` and :data:`CLIENT` registered).

    Cases go in chunks of ``chunk_size``; after each chunk the host has settled every message and the
    chunk's dead letters are read (and removed). Conflicting cases' originals are submitted, and
    accepted, first. A last valid order follows the whole corpus.

    Args:
        deps: The host's stores, queues and settings (in-memory, or the emulators); the manifest's reasons
            assume the default queue names.
        cases: The corpus.
        run_id: Prefix of every message id and valid order id, unique per run.
        chunk_size: Bad messages per chunk (at most 32: see :func:`_take_dead_letters`).
        timeout_s: Longest wait for one chunk to be settled.

    Returns:
        What the run left behind, for :func:`problems`.
    """
    run = CorpusRun(run_id, [case for case in cases if STORAGE in case.transports])
    states, documents = run.recording(deps.states, deps.orders)
    settings = Settings.load(env={}, **{**deps.settings.values(), "CLIENTS": CLIENTS})
    inbound = CLIENT.inbound_queue
    orders = deps.queues.queue(inbound)
    host = dev_host(replace(deps, states=states, orders=documents, settings=settings), roles=("submission",))
    host.start()
    try:
        originals = [case for case in run.cases if case.original is not None]
        for case in originals:
            assert case.original is not None
            orders.send(case.original.decode(), message_id=f"{run.message_id(case)}-original")
        _wait_until_empty(deps.queues, inbound, timeout_s=timeout_s)
        run.keep_originals(deps)

        def send_valid() -> None:
            order_id, body = run.new_valid_order()
            orders.send(body.decode(), message_id=f"{order_id}:submit")

        for chunk in _chunks(run.cases, chunk_size):
            # Valid and bad alternate, so that every receive batch mixes them.
            for case in chunk:
                send_valid()
                orders.send(case.text, message_id=run.message_id(case))
            send_valid()
            _wait_until_empty(deps.queues, inbound, timeout_s=timeout_s)
            _take_dead_letters(deps.queues, inbound, run)
        send_valid()  # the consumer is still running after everything above
        _wait_until_empty(deps.queues, inbound, timeout_s=timeout_s)
        take_replies(deps.queues, run)
    finally:
        host.stop()
    return run


def problems(run: CorpusRun, deps: HostDeps) -> list[str]:
    """Every way ``run`` falls short of what orderflow promises for bad input, one line each naming the
    case; empty when it keeps every promise.

    Nothing written for a bad message is checked on the write log (:meth:`CorpusRun.recording`), not by
    reading ids back: it covers every id a body could name, and a read of a missing item is slow on
    cosmosdb-server (it answers 500, then the store asks whether the item exists).
    """
    found: list[str] = []
    for case in run.cases:
        dead = run.dead_letters.get(run.message_id(case))
        if dead is None:
            found.append(f"{case.name}: not dead-lettered (expected {case.reason})")
        elif dead.reason != case.reason:
            found.append(
                f"{case.name}: dead-lettered as {dead.reason} ({dead.description}), not {case.reason}"
            )
        elif not dead.description.strip():
            found.append(f"{case.name}: dead-lettered without a description")
        elif dead.body != case.text:
            found.append(f"{case.name}: the dead letter's body differs from the message's")
        for order_id in case.order_ids() - run.kept_ids:
            if order_id in run.replies:
                found.append(f"{case.name}: {run.replies[order_id]} sent for a message that was refused")
    accepted = sorted([*run.valid_ids, *run.kept_ids])
    written_orders = sorted(client_order_id(key) for key in run.written_orders)
    written_states = sorted(client_order_id(key) for key in run.written_states)
    if written_orders != accepted:
        found.append(f"order documents written {sorted(run.written_orders)}, expected exactly {accepted}")
    if written_states != accepted:
        found.append(f"state records written {sorted(run.written_states)}, expected exactly {accepted}")
    stored = deps.states.count(StateQuery())
    if stored != len(accepted):
        found.append(f"{stored} state records exist; expected {len(accepted)}")
    for name, (document, state) in run.originals.items():
        key, order_id = document.order_id, client_order_id(document.order_id)
        if deps.orders.get(key) != document:
            found.append(f"{name}: the first order's document changed")
        if deps.states.get(key).etag != state.etag:
            found.append(f"{name}: the first order's state record changed")
        if sorted(run.replies.get(order_id, [])) != ["Received", "Rejected"]:
            found.append(f"{name}: replies {run.replies.get(order_id)}, expected Received and Rejected")
    for order_id in run.valid_ids:
        for kind, read in (("order document", deps.orders.get), ("state record", deps.states.get)):
            try:
                read(order_key(CLIENT.client_id, order_id))
            except NotFound:
                found.append(f"valid order {order_id}: no {kind}")
        if run.replies.get(order_id) != ["Received"]:
            found.append(f"valid order {order_id}: replies {run.replies.get(order_id)}, expected Received")
    return found
