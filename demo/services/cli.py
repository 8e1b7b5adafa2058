"""``python -m demo.services``: the demo services from the command line (:func:`main`, :func:`parse_args`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from pydantic import ValidationError

from demo.faults import FaultPlan
from demo.services.app import create_app
from demo.services.auth import AgentAuth
from demo.services.payments import RefundPolicy
from demo.tpch import DEFAULT_DEMO_ORDERS, DEFAULT_SCALE, DEFAULT_STOCK_DIVISOR, ensure_dataset, load_catalog
from devhost.local_issuer import KEY_FILE, LocalIssuer
from devhost.serving import server_url
from orderflow.settings.hosts import is_loopback_host

MAX_PORT = 65535
"""Highest TCP port."""


async def _serve_until_stopped(server: uvicorn.Server, sock: socket.socket) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # start-up failed: let its exception out
            return
        await asyncio.sleep(0.01)
    print(f"demo services listening on {server_url(server)}", flush=True)
    await task


@dataclass(frozen=True)
class ServiceOptions:
    """The command line of ``python -m demo.services``, parsed and validated by :func:`parse_args`."""

    host: str
    port: int
    data_dir: Path
    scale: float
    orders: int  # 0 = all
    stock_divisor: int
    faults: FaultPlan
    refund_policy: RefundPolicy
    log_level: str
    key_file: Path
    allow_anonymous: bool


def _loopback_only(host: str) -> bool:
    """Whether binding ``host`` listens on this machine's loopback interface only: a loopback name or
    address, never an unspecified one (``0.0.0.0``, ``::``: every interface)."""
    try:
        unspecified = ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        unspecified = False
    return is_loopback_host(host) and not unspecified


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening, for uvicorn to serve on.

    Bound here rather than by uvicorn, whose failure to bind ends in a traceback and exit status 3.
    Connections accepted from it have Nagle's algorithm off (``TCP_NODELAY``, inherited from this
    socket), as those of a server uvicorn binds itself do: asyncio sets it only on sockets whose proto
    is ``IPPROTO_TCP``, and this one's is 0. With Nagle on, an answer's body, written after its headers,
    waits for the client's delayed ACK of them: up to 40 ms a call.

    Raises:
        OSError: the address cannot be bound (the port is taken, the host is not this machine's, or the
            port needs privileges).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=2048)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """``--key-file`` and ``--allow-anonymous``: whose tokens the services accept, if any."""
    parser.add_argument(
        "--key-file",
        type=Path,
        default=KEY_FILE,
        help="the local issuer's signing key, whose tokens the services accept (made if missing)",
    )
    parser.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="check no token (a local Functions host, whose credential cannot get the demo's tokens); "
        "loopback only",
    )


def parse_args(argv: Sequence[str] | None = None) -> ServiceOptions:
    """Parse the command line of ``python -m demo.services``.

    Flags: ``--host``, ``--port``, ``--data-dir``, ``--scale``, ``--orders``, ``--stock-divisor``,
    ``--faults JSON`` (a FaultPlan), ``--cancellation-fee AMOUNT`` (the RefundPolicy's ``fee``, e.g.
    ``2.50``; default 0 = no fee), ``--fee-after-s SECONDS`` (its ``fee_after_s``; default 0),
    ``--log-level``, ``--key-file`` (the local issuer's key, whose tokens are the only ones accepted:
    :mod:`demo.services.auth`), ``--allow-anonymous`` (no token checked; loopback ``--host`` only).

    Args:
        argv: The arguments without the program name; None reads ``sys.argv``.

    Raises:
        SystemExit: Status 2 with a message on stderr for an unknown flag or an invalid value (e.g. a
            malformed ``--faults``, a negative ``--cancellation-fee`` or a ``--port`` above 65535);
            status 0 after ``--help``.
    """
    parser = argparse.ArgumentParser(
        prog="python -m demo.services", description="Run the demo inventory, payment and shipping services."
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="loopback interface to bind (default 127.0.0.1; no other)"
    )
    parser.add_argument("--port", type=int, default=8082, help="TCP port; 0 picks a free one (default 8082)")
    parser.add_argument("--data-dir", type=Path, default=Path(".data/tpch"), help="TPC-H CSV directory")
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE, help="TPC-H scale factor if generating")
    parser.add_argument("--orders", type=int, default=DEFAULT_DEMO_ORDERS, help="orders to load (0 = all)")
    parser.add_argument("--stock-divisor", type=int, default=DEFAULT_STOCK_DIVISOR)
    parser.add_argument("--faults", default="{}", help="FaultPlan as JSON, e.g. '{\"transient_rate\": 0.1}'")
    parser.add_argument(
        "--cancellation-fee",
        default="0",
        metavar="AMOUNT",
        help="fee kept when a charge is refunded after --fee-after-s, e.g. 2.50 (default 0: no fee)",
    )
    parser.add_argument(
        "--fee-after-s",
        default="0",
        metavar="SECONDS",
        help="free-cancellation window after a charge, in seconds (default 0)",
    )
    parser.add_argument("--log-level", default="WARNING", help="level of the demo's own loggers")
    _add_auth_arguments(parser)
    args = parser.parse_args(argv)

    if not 0 <= args.port <= MAX_PORT:
        parser.error(f"--port must be 0 (a free port) to {MAX_PORT}, not {args.port}")
    if args.orders < 0:
        parser.error(f"--orders must be 0 (all) or more, not {args.orders}")
    if args.stock_divisor < 1:
        parser.error(f"--stock-divisor must be at least 1, not {args.stock_divisor}")
    if not _loopback_only(args.host):
        # The steering and reporting routes (/faults, /audit, /stock, ...) check no token.
        parser.error(
            "the demo services serve on a loopback --host only (their steering routes check no token)"
        )
    try:
        plan = FaultPlan.model_validate_json(args.faults)
    except ValidationError as exc:
        parser.error(f"--faults: {exc}")
    try:
        policy = RefundPolicy.model_validate({"fee": args.cancellation_fee, "fee_after_s": args.fee_after_s})
    except ValidationError as exc:
        parser.error(f"--cancellation-fee / --fee-after-s: {exc}")
    return ServiceOptions(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        scale=args.scale,
        orders=args.orders,
        stock_divisor=args.stock_divisor,
        faults=plan,
        refund_policy=policy,
        log_level=args.log_level,
        key_file=args.key_file,
        allow_anonymous=args.allow_anonymous,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo services from the command line (flags: :func:`parse_args`); returns the exit status.

    Example: ``python -m demo.services --port 8082 --orders 200 --faults '{"transient_rate": 0.1}'
    --cancellation-fee 2.50 --fee-after-s 60``.
    Prints ``demo services listening on http://HOST:PORT`` once ready; stops on SIGINT/SIGTERM.

    Returns:
        0 once stopped; 1, after one line on stderr, when the address cannot be bound (e.g. the port is
        taken) or the TPC-H data cannot be read or generated.
    """
    options = parse_args(argv)
    logging.basicConfig(
        level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    prog = "python -m demo.services"
    try:
        # Bound before the data loads: a taken port is reported at once.
        sock = listen_socket(options.host, options.port)
    except OSError as exc:
        # socket.create_server's own message repeats the address.
        reason = os.strerror(exc.errno) if exc.errno else exc
        print(f"{prog}: error: cannot listen on {options.host}:{options.port}: {reason}", file=sys.stderr)
        return 1
    with sock:
        try:
            data_dir = ensure_dataset(options.data_dir, options.scale)
            catalog = load_catalog(
                data_dir, orders=options.orders or None, stock_divisor=options.stock_divisor
            )
            auth = None
            if not options.allow_anonymous:
                auth = AgentAuth.trusting(LocalIssuer.from_key_file(options.key_file))
        # tpchgen-cli missing or failed, a table unreadable; a signing key others may read
        except (OSError, RuntimeError, ValueError) as exc:
            print(f"{prog}: error: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            return 1
        app = create_app(catalog, options.faults, auth=auth, refund_policy=options.refund_policy)
        config = uvicorn.Config(
            app, host=options.host, port=options.port, log_level="warning", workers=1, lifespan="off"
        )
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it handled
            asyncio.run(_serve_until_stopped(uvicorn.Server(config), sock))
    return 0
