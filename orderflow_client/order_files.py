"""The orders ``orderflow submit`` sends: read from a file as strictly as the service decodes a
submission (:func:`read_orders`), or generated (:func:`generate_orders`)."""

from __future__ import annotations

import json
import random
import re
import uuid
from pathlib import Path
from typing import Any

from orderflow.errors import InvalidMessage
from orderflow.messages import INVALID_JSON, NOT_AN_OBJECT, TOO_LARGE, decode_json_object, json_type
from orderflow_client.cli_common import fail

_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _skip_whitespace(text: str, pos: int) -> int:
    match = _JSON_WHITESPACE.match(text, pos)
    return match.end() if match else pos


def _array_elements(path: Path, text: str) -> list[tuple[int, str]]:
    """The source text of each element of the JSON array ``text``, with the line it starts on.

    Only finds where elements start and end: each is then decoded on its own by the service's strict
    decoder, as the service would decode it.

    Raises:
        typer.Exit: 2, after a one-line error, when ``text`` is not a JSON array.
    """
    scanner = json.JSONDecoder()  # lenient, for the extent of each element only
    elements: list[tuple[int, str]] = []
    line, counted = 1, 0
    pos = _skip_whitespace(text, 1)
    closed = text.startswith("]", pos)
    while not closed:
        try:
            _, end = scanner.raw_decode(text, pos)
        except RecursionError:
            fail(f"{path}: order {len(elements) + 1} nests arrays or objects too deeply to be read", code=2)
        except ValueError as exc:  # JSONDecodeError (with line and column), or too many digits
            fail(f"{path}: not a JSON array of orders: {str(exc)[:200]}", code=2)
        line += text.count("\n", counted, pos)
        counted = pos
        elements.append((line, text[pos:end]))
        pos = _skip_whitespace(text, end)
        if text.startswith(",", pos):
            pos = _skip_whitespace(text, pos + 1)
        elif text.startswith("]", pos):
            closed = True
        else:
            line_at = text.count("\n", 0, pos) + 1
            fail(f"{path}: not a JSON array of orders: expected ',' or ']' on line {line_at}", code=2)
    pos = _skip_whitespace(text, pos + 1)
    if pos < len(text):
        line_at = text.count("\n", 0, pos) + 1
        fail(f"{path}: not a JSON array of orders: more data after it on line {line_at}", code=2)
    return elements


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _decode_order(path: Path, where: str, body: str) -> dict[str, Any]:
    """One order's JSON text decoded exactly as the service decodes a message body
    (:func:`orderflow.messages.decode_json_object`: no duplicate keys, no NaN, exact decimals ...).

    Raises:
        typer.Exit: 2, after a one-line error naming the file, the order and the service's reason.
    """
    try:
        return decode_json_object(body)
    except InvalidMessage as exc:
        if exc.reason == NOT_AN_OBJECT:
            fail(
                f"{path}: {where or 'order 1'} is a JSON {json_type(json.loads(body))}, not an object", code=2
            )
        place = f"{where}: " if where else ""
        # The service's words, of a message body: here the body is an order in a file.
        what = f"the order {exc.description[5:]}" if exc.description.startswith("body ") else exc.description
        fail(f"{path}: {place}{what} (the service refuses this as {exc.reason})", code=2)


def read_orders(path: Path, *, reply_to: str) -> list[dict[str, Any]]:
    """The orders in ``path``: one JSON order, a JSON array of orders, or JSON lines, each decoded as
    strictly as the service decodes a submission, so that nothing the service would dead-letter as
    ``InvalidJson`` (a duplicate key, ``NaN`` ...) is silently made valid by re-encoding it.

    An order without ``replyTo`` gets ``reply_to``; one naming another queue is refused rather than
    redirected, since ``replyTo`` is part of the order (a resubmission with another would conflict).

    Raises:
        typer.Exit: 2, after a one-line error naming the file, when it cannot be read, is not UTF-8, holds
            no orders, holds something the service would refuse as JSON or something other than JSON
            objects, or an order names a ``replyTo`` other than ``reply_to``.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        fail(f"{path}: cannot read the order file: {exc.strerror or exc}", code=2)
    try:
        # utf-8-sig: editors on Windows write a byte-order mark (the file's, not the order's: the CLI
        # sends each order re-encoded, without one).
        text = data.decode("utf-8-sig").strip(" \t\r\n")
    except UnicodeDecodeError as exc:
        fail(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8",
            code=2,
        )
    bodies: list[tuple[str, str]]  # (where in the file, the order's JSON text)
    if text.startswith("["):
        bodies = [
            (f"order {n} (line {line})", body)
            for n, (line, body) in enumerate(_array_elements(path, text), 1)
        ]
    else:
        # "\n" only: str.splitlines() would also split at U+2028 and others, which JSON strings may hold.
        lines = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip(" \t\r")]
        bodies = [("", text)] if text else []
        if len(lines) > 1 and _is_json(lines[0][1]):
            try:
                decode_json_object(text)
            except InvalidMessage as exc:
                # Not one order: JSON lines, if its first line is JSON by itself.
                if exc.reason in (INVALID_JSON, TOO_LARGE):
                    bodies = [(f"order {n} (line {line})", body) for n, (line, body) in enumerate(lines, 1)]
    if not bodies:
        fail(
            f"{path}: no orders in the file: expected a JSON order, a JSON array of orders or JSON lines",
            code=2,
        )
    orders = [_decode_order(path, where, body) for where, body in bodies]
    for (where, _), order in zip(bodies, orders, strict=True):
        named = order.get("replyTo", reply_to)
        if named != reply_to:
            fail(
                f"{path}: {where or 'the order'} has replyTo {json.dumps(named)} but --reply-to is "
                f"{reply_to!r}; make them agree, or leave replyTo out of the file to use --reply-to",
                code=2,
            )
        order.setdefault("replyTo", reply_to)
    return orders


def generate_orders(count: int, *, seed: int, reply_to: str) -> list[dict[str, Any]]:
    """``count`` valid synthetic orders (deterministic for ``seed``), for trying the system out."""
    rng = random.Random(seed)
    run = uuid.UUID(int=rng.getrandbits(128)).hex[:8]
    orders = []
    for n in range(count):
        items = [
            {"sku": str(rng.randint(1, 2000)), "quantity": rng.randint(1, 5)}
            for _ in range(rng.randint(1, 4))
        ]
        orders.append(
            {
                "schemaVersion": 1,
                "orderId": f"gen-{run}-{n:05d}",
                "customerId": str(rng.randint(1, 1500)),
                "customerName": f"Customer#{rng.randint(1, 1500):09d}",
                "currency": "USD",
                "amount": f"{rng.randint(100, 500000) / 100:.2f}",
                "items": items,
                "carrier": rng.choice(["AIR", "MAIL", "SHIP", "TRUCK", "RAIL", "FOB", "REG AIR"]),
                "replyTo": reply_to,
            }
        )
    return orders
