"""CPU of one Azure SDK call against the local emulators, by kind of client: the floor under an order's cost.

For each request an order makes to the emulators (a Storage queue ``send``, ``receive`` and ``delete``;
a Cosmos DB ``create``, point ``read``, conditional ``replace`` and ``query``), the CPU milliseconds one
call costs the calling process, from its own CPU counter over ``calls`` calls on a fresh queue and
container, the median of ``repeats`` measurements. Three kinds of client are measured:

- ``orderflow``: the synchronous clients as orderflow builds them for a loopback endpoint
  (:func:`devhost.http_transport.transport_for` under the SDK's own pipeline), one call at a time;
- ``sdk default``: the same clients on azure-core's default ``RequestsTransport`` (what Azure gets);
- ``async``: the SDKs' ``aio`` clients on aiohttp, ``concurrency`` calls at once on one event loop (the
  "async clients on one event loop instead of thread pools" a process could switch to).

:mod:`bench.sdk_floor` says what the figures mean for an order: each devhost process's SDK floor (the
``orderflow`` CPU figures times its requests per order) and the serial path of one order (the wall
figures times the requests it makes one after another). ``python -m bench`` runs this module in a
process of its own (``python -m bench.sdk_calls``), so that no request counter and no other work of the
benchmark's process is in the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer
from azure.core import MatchConditions
from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey
from azure.cosmos.aio import ContainerProxy as AsyncContainerProxy
from azure.cosmos.aio import CosmosClient as AsyncCosmosClient
from azure.storage.queue import QueueClient
from azure.storage.queue.aio import QueueClient as AsyncQueueClient

from bench.sdk_floor import OPERATIONS, serial_path_ms
from devhost.emulators import COSMOS_EMULATOR_KEY, REPO_ROOT, LocalEndpoints, start_local_emulators
from devhost.http_transport import transport_for
from devhost.queues.factory import queue_endpoint

CLIENTS = ("orderflow", "sdk default", "async")
"""The kinds of client measured (module docstring)."""

MESSAGE_BYTES = 600
"""Body size of a measured queue message: about an agent request's."""

DOCUMENT_PADDING = 1500
"""Padding of a measured document, characters: a state record of a three-step order is about 2 KB."""

PAGE_ITEMS = 8
"""Items per page of the measured query (the starter asks for a small page of Pending records)."""

QUERY = "SELECT * FROM c WHERE c.processState = @state"

Costs = dict[str, float]
"""Measured call -> CPU milliseconds per call."""


class Timing(NamedTuple):
    """One measured call's cost to the calling process, milliseconds per call."""

    cpu_ms: float
    """Its CPU (the process's own counter)."""
    wall_ms: float
    """Its wall-clock time, one call at a time: what it adds to a chain of calls made one after another."""


Timings = dict[str, Timing]
"""Measured call -> its :class:`Timing`."""


def _message(index: int) -> str:
    return json.dumps({"index": index, "pad": "x" * MESSAGE_BYTES})


def _document(index: int, state: str = "Pending") -> dict[str, Any]:
    order_id = f"o{index}"
    steps = {f"s{n}": {"status": "NotStarted", "calls": 0} for n in range(3)}
    return {
        "id": order_id,
        "orderId": order_id,
        "processState": state,
        "steps": steps,
        "pad": "y" * DOCUMENT_PADDING,
    }


def _check_received(received: int, sent: int) -> None:
    """Every receive got one message: otherwise the figures would be of empty receives."""
    if received != sent:
        raise RuntimeError(f"{sent} messages sent, {received} received: the queue was not this measurement's")


def _check_page(items: int, records: int) -> None:
    """The query's first page is full (or holds every record): otherwise it measured an empty query."""
    if items != min(PAGE_ITEMS, records):
        raise RuntimeError(f"the query's first page held {items} of {records} records")


def _ms_per_call(run: Callable[[], int]) -> Timing:
    """CPU and wall-clock milliseconds per call of ``run``, which makes the calls one at a time and
    returns how many it made."""
    spent = _Spent()
    with spent:
        made = run()
    return spent.per_call(made)


def _ms_since(began: float, made: int) -> float:
    return (time.process_time() - began) * 1000 / max(made, 1)


async def _ms_per_async_call(run: Callable[[], Awaitable[int]]) -> float:
    """:func:`_ms_per_call` of calls made on this event loop."""
    began = time.process_time()
    return _ms_since(began, await run())


async def _gathered(gate: asyncio.Semaphore, make: Callable[[int], Awaitable[object]], count: int) -> int:
    """``make(0)`` .. ``make(count - 1)`` awaited at once, at most ``gate``'s number at a time; ``count``."""

    async def one(index: int) -> None:
        async with gate:
            await make(index)

    await asyncio.gather(*(one(index) for index in range(count)))
    return count


def measure_sync(endpoints: LocalEndpoints, *, lean: bool, calls: int) -> Timings:
    """Each operation's CPU and wall time per call with the synchronous clients, one call at a time.

    Args:
        endpoints: The emulators (a queue and a database of their own are made, then dropped).
        lean: orderflow's loopback transport (True) or azure-core's default (False).
        calls: Calls of each operation.
    """
    queue_options: dict[str, Any] = (
        {"transport": transport_for(queue_endpoint(endpoints.storage_connection_string))} if lean else {}
    )
    cosmos_options: dict[str, Any] = {"transport": transport_for(endpoints.cosmos_endpoint)} if lean else {}
    costs: Timings = {}
    queue = QueueClient.from_connection_string(
        endpoints.storage_connection_string, f"sdk-calls-{uuid.uuid4().hex[:12]}", **queue_options
    )
    queue.create_queue()
    try:
        queue.get_queue_properties()  # opens the connection outside the measurement
        costs.update(_sync_queue_costs(queue, calls))
    finally:
        queue.delete_queue()
    client = CosmosClient(
        endpoints.cosmos_endpoint, credential=endpoints.cosmos_key, connection_verify=False, **cosmos_options
    )
    database = client.create_database_if_not_exists(f"sdk-calls-{uuid.uuid4().hex[:12]}")
    try:
        container = database.create_container_if_not_exists("records", partition_key=PartitionKey("/orderId"))
        container.read()  # opens the connection (and its TLS session) outside the measurement
        costs.update(_sync_cosmos_costs(container, calls))
    finally:
        client.delete_database(database.id)
    return costs


def _sync_queue_costs(queue: QueueClient, calls: int) -> Timings:
    """One message at a time through an empty queue: send it, receive it, delete it, each call timed.

    An order's queues are about empty when its hops reach them; a queue holding many invisible messages
    (all the sends first, then all the receives) makes Azurite's receive scan past them, about half a
    millisecond more at 300.
    """
    spent = {call: _Spent() for call in ("queue send", "queue receive", "queue delete")}
    for index in range(calls):
        with spent["queue send"]:
            queue.send_message(_message(index))
        with spent["queue receive"]:
            # One page of at most one message: as a consumer asking for what it has room for.
            page = list(next(queue.receive_messages(max_messages=1, visibility_timeout=300).by_page()))
        _check_received(len(page), 1)
        with spent["queue delete"]:
            queue.delete_message(page[0])
    return {call: each.per_call(calls) for call, each in spent.items()}


class _Spent:
    """CPU and wall seconds spent inside ``with`` blocks, summed."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self._began = (0.0, 0.0)

    def __enter__(self) -> None:
        self._began = (time.process_time(), time.perf_counter())

    def __exit__(self, *exc: object) -> None:
        cpu, wall = self._began
        self.cpu_s += time.process_time() - cpu
        self.wall_s += time.perf_counter() - wall

    def per_call(self, calls: int) -> Timing:
        return Timing(self.cpu_s * 1000 / max(calls, 1), self.wall_s * 1000 / max(calls, 1))


def _sync_cosmos_costs(container: ContainerProxy, calls: int) -> Timings:
    etags: dict[int, str] = {}

    def create() -> int:
        for index in range(calls):
            container.create_item(_document(index))
        return calls

    def read() -> int:
        for index in range(calls):
            etags[index] = container.read_item(f"o{index}", partition_key=f"o{index}")["_etag"]
        return calls

    def replace() -> int:
        for index in range(calls):
            container.replace_item(
                f"o{index}",
                _document(index, "Processing"),
                etag=etags[index],
                match_condition=MatchConditions.IfNotModified,
            )
        return calls

    def query() -> int:
        for _ in range(calls):
            pages = container.query_items(
                QUERY,
                parameters=[{"name": "@state", "value": "Processing"}],
                enable_cross_partition_query=True,
                max_item_count=PAGE_ITEMS,
            ).by_page()
            _check_page(len(list(next(pages))), calls)
        return calls

    return {
        "cosmos create": _ms_per_call(create),
        "cosmos read": _ms_per_call(read),
        "cosmos replace": _ms_per_call(replace),
        "cosmos query": _ms_per_call(query),
    }


async def measure_async(endpoints: LocalEndpoints, *, calls: int, concurrency: int) -> Costs:
    """Each operation's CPU per call with the SDKs' ``aio`` clients (aiohttp), ``concurrency`` calls at
    once on this event loop.

    Args:
        endpoints: The emulators (a queue and a database of their own are made, then dropped).
        calls: Calls of each operation.
        concurrency: Calls outstanding at once.
    """
    gate = asyncio.Semaphore(concurrency)
    costs: Costs = {}
    queue = AsyncQueueClient.from_connection_string(
        endpoints.storage_connection_string, f"sdk-calls-{uuid.uuid4().hex[:12]}"
    )
    async with queue:
        await queue.create_queue()
        try:
            received: list[Any] = []

            async def receive_one(_index: int) -> None:
                async for page in queue.receive_messages(max_messages=1, visibility_timeout=300).by_page():
                    received.extend([message async for message in page])
                    break

            # Every connection the calls at once will use is opened before they are measured.
            await _gathered(gate, lambda _index: queue.get_queue_properties(), concurrency)
            costs["queue send"] = await _ms_per_async_call(
                lambda: _gathered(gate, lambda index: queue.send_message(_message(index)), calls)
            )
            costs["queue receive"] = await _ms_per_async_call(lambda: _gathered(gate, receive_one, calls))
            _check_received(len(received), calls)
            costs["queue delete"] = await _ms_per_async_call(
                lambda: _gathered(gate, lambda index: queue.delete_message(received[index]), len(received))
            )
        finally:
            await queue.delete_queue()
    async with AsyncCosmosClient(
        endpoints.cosmos_endpoint, credential=endpoints.cosmos_key, connection_verify=False
    ) as client:
        database = await client.create_database_if_not_exists(f"sdk-calls-{uuid.uuid4().hex[:12]}")
        try:
            container = await database.create_container_if_not_exists(
                "records", partition_key=PartitionKey("/orderId")
            )
            await _gathered(gate, lambda _index: container.read(), concurrency)
            costs.update(await _async_cosmos_costs(container, calls, gate))
        finally:
            await client.delete_database(database.id)
    return costs


async def _async_cosmos_costs(container: AsyncContainerProxy, calls: int, gate: asyncio.Semaphore) -> Costs:
    etags: dict[int, str] = {}

    async def read_one(index: int) -> None:
        etags[index] = (await container.read_item(f"o{index}", partition_key=f"o{index}"))["_etag"]

    async def replace_one(index: int) -> None:
        await container.replace_item(
            f"o{index}",
            _document(index, "Processing"),
            etag=etags[index],
            match_condition=MatchConditions.IfNotModified,
        )

    async def query_one(_index: int) -> None:
        pages = container.query_items(
            QUERY, parameters=[{"name": "@state", "value": "Processing"}], max_item_count=PAGE_ITEMS
        ).by_page()
        async for page in pages:
            _check_page(len([item async for item in page]), calls)
            break

    return {
        "cosmos create": await _ms_per_async_call(
            lambda: _gathered(gate, lambda index: container.create_item(_document(index)), calls)
        ),
        "cosmos read": await _ms_per_async_call(lambda: _gathered(gate, read_one, calls)),
        "cosmos replace": await _ms_per_async_call(lambda: _gathered(gate, replace_one, calls)),
        "cosmos query": await _ms_per_async_call(lambda: _gathered(gate, query_one, calls)),
    }


def call_costs(
    endpoints: LocalEndpoints, *, calls: int, repeats: int, concurrency: int
) -> dict[str, dict[str, Costs]]:
    """Every kind of client's CPU per call (:data:`CLIENTS`) and the orderflow client's wall time per
    call, each operation the median of ``repeats`` measurements, the kinds interleaved so that a slow
    spell of the machine reaches all of them.

    Returns:
        ``{"cpu": {client: {operation: ms per call}}, "wall": {"orderflow": {operation: ms per call}}}``,
        rounded to 0.01 ms. Only the synchronous orderflow client's wall time is kept: it is what the
        devhosts make their calls with, one after another on a thread (the async clients' calls overlap,
        so theirs is not one call's).
    """
    cpu: dict[str, dict[str, list[float]]] = {client: {} for client in CLIENTS}
    wall: dict[str, list[float]] = {}
    for _ in range(repeats):
        lean = measure_sync(endpoints, lean=True, calls=calls)
        default = measure_sync(endpoints, lean=False, calls=calls)
        measured = {
            "orderflow": {operation: timing.cpu_ms for operation, timing in lean.items()},
            "sdk default": {operation: timing.cpu_ms for operation, timing in default.items()},
            "async": asyncio.run(measure_async(endpoints, calls=calls, concurrency=concurrency)),
        }
        for client, costs in measured.items():
            for operation, ms in costs.items():
                cpu[client].setdefault(operation, []).append(ms)
        for operation, timing in lean.items():
            wall.setdefault(operation, []).append(timing.wall_ms)
    return {
        "cpu": {client: _medians(by_operation) for client, by_operation in cpu.items()},
        "wall": {"orderflow": _medians(wall)},
    }


def _medians(by_operation: Mapping[str, list[float]]) -> Costs:
    return {operation: round(statistics.median(values), 2) for operation, values in by_operation.items()}


def sdk_calls_run(
    endpoints: LocalEndpoints,
    *,
    calls: int,
    repeats: int,
    concurrency: int,
    report_path: Path,
    timeout_s: float,
) -> dict[str, Any]:
    """Run ``python -m bench.sdk_calls`` against ``endpoints`` in a process of its own; its figures.

    Raises:
        RuntimeError: it failed (its last lines of output are in the message) or wrote no figures.
        subprocess.TimeoutExpired: it ran longer than ``timeout_s`` seconds (it is killed).
    """
    environment = {
        **os.environ,
        "STORAGE_CONNECTION_STRING": endpoints.storage_connection_string,
        "COSMOS_ENDPOINT": endpoints.cosmos_endpoint,
        "COSMOS_KEY": endpoints.cosmos_key,
        "PYTHONWARNINGS": "ignore",  # the emulator's self-signed certificate warns on every request
    }
    command = [sys.executable, "-m", "bench.sdk_calls", "--calls", str(calls), "--repeats", str(repeats)]
    command += ["--concurrency", str(concurrency), "--report", str(report_path)]
    done = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0 or not report_path.exists():
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"bench.sdk_calls exited {done.returncode}: {tail}")
    figures: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    return figures


app = typer.Typer(add_completion=False)


@app.command()
def main(
    *,
    calls: Annotated[int, typer.Option(min=1, help="Calls of each operation per measurement.")] = 300,
    repeats: Annotated[int, typer.Option(min=1, help="Measurements of each; the median is reported.")] = 3,
    concurrency: Annotated[int, typer.Option(min=1, help="Calls at once of the async clients.")] = 16,
    report: Annotated[Path, typer.Option(help="Where to write the JSON figures.")] = Path("sdk-calls.json"),
) -> None:
    """Measure the CPU of one SDK call of each kind; print the table and write the JSON figures.

    Uses the emulators named by ``STORAGE_CONNECTION_STRING`` and ``COSMOS_ENDPOINT`` (and ``COSMOS_KEY``)
    when both are set, else starts Azurite and cosmosdb-server and stops them after.
    """
    storage, cosmos = os.environ.get("STORAGE_CONNECTION_STRING"), os.environ.get("COSMOS_ENDPOINT")
    if storage and cosmos:
        key = os.environ.get("COSMOS_KEY") or COSMOS_EMULATOR_KEY
        endpoints = LocalEndpoints(storage_connection_string=storage, cosmos_endpoint=cosmos, cosmos_key=key)
        measured = call_costs(endpoints, calls=calls, repeats=repeats, concurrency=concurrency)
    else:
        with start_local_emulators() as emulators:
            measured = call_costs(emulators.endpoints, calls=calls, repeats=repeats, concurrency=concurrency)
    figures = measured["cpu"]
    result = {
        "calls": calls,
        "repeats": repeats,
        "concurrency": concurrency,
        "ms_per_call": figures,
        "wall_ms_per_call": measured["wall"],
    }
    report.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    width = max(len(call) for call in OPERATIONS)
    walls = measured["wall"]["orderflow"]
    columns = "  ".join(f"{client:>11}" for client in CLIENTS)
    typer.echo(f"{'CPU ms per call':<{width}}  {columns}  {'wall ms':>11}")
    for call in OPERATIONS:
        cells = "  ".join(f"{figures[client][call]:>11.2f}" for client in CLIENTS)
        typer.echo(f"{call:<{width}}  {cells}  {walls[call]:>11.2f}")
    typer.echo(f"one order's serial emulator requests at these wall times: {serial_path_ms(walls)} ms")


if __name__ == "__main__":
    app()
