"""Serving an ASGI app on loopback from a thread of the calling process.

The local host serves its operator API this way and the local issuer its JWKS; the demo services and
the tests use the same three functions. :func:`serve_in_thread` starts a uvicorn server in a daemon
thread and returns once it accepts connections, :func:`server_url` reads the address it bound (the real
port when asked for port 0), :func:`stop` shuts it down.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import uvicorn

logger = logging.getLogger(__name__)


def server_url(server: uvicorn.Server) -> str:
    """The ``http://host:port`` a started server listens on (the real port when started with port 0)."""
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    return f"http://{host}:{port}"


def serve_in_thread(
    app: Any, host: str = "127.0.0.1", port: int = 0, *, startup_timeout_s: float = 10.0
) -> tuple[uvicorn.Server, threading.Thread]:
    """Start ``app`` on a uvicorn server in a daemon thread and wait until it accepts connections.

    Args:
        app: The ASGI app (a FastAPI app, say).
        host: Interface to bind.
        port: TCP port; 0 picks a free one (read it back with :func:`server_url`).
        startup_timeout_s: How long to wait for the server to start (seconds).

    Returns:
        ``(server, thread)``; pass both to :func:`stop`.

    Raises:
        RuntimeError: The server did not start in time or exited during start-up (e.g. port in use).
    """
    # Requests still running at shutdown (a hung request) are cancelled after one second.
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", workers=1, lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"http-server-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the server failed to start on {host}:{port}")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not start on {host}:{port} within {startup_timeout_s} s")
        time.sleep(0.01)
    return server, thread


def stop(server: uvicorn.Server, thread: threading.Thread, *, timeout_s: float = 10.0) -> None:
    """Shut down a server started by :func:`serve_in_thread` and join its thread.

    Args:
        server: The server.
        thread: Its thread.
        timeout_s: How long to wait for a graceful exit before forcing it (seconds).
    """
    server.should_exit = True
    thread.join(timeout_s)
    if thread.is_alive():
        server.force_exit = True
        thread.join(timeout_s)
    if thread.is_alive():
        logger.warning("server thread %s did not stop within %s s", thread.name, 2 * timeout_s)
