"""durabletask's in-memory backend in a process of its own, one per devhost process.

``python -m devhost.durabletask_backend --port P`` serves ``durabletask.testing``'s backend (the real
gRPC sidecar service, in memory) on ``127.0.0.1:P``, prints ``durabletask backend ready on 127.0.0.1:P`` and
runs until SIGTERM or until its standard input reaches end of file. The devhost that starts it
(:class:`BackendProcess`) holds the other end of that pipe, so the backend ends with its devhost even
when the devhost is killed with SIGKILL: an orchestration still lives and dies with the process that
claimed it, and the supervisor recovers it from the state store as before.

Why a process: the backend's gRPC server threads otherwise share the devhost's interpreter lock with
its worker, client, queue consumers and SDK clients (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path
from types import FrameType
from typing import IO, Annotated

import durabletask.internal.orchestrator_service_pb2_grpc as stubs
import grpc
import typer
from durabletask.testing import InMemoryOrchestrationBackend

from orderflow.heap import settle_heap

READY = "durabletask backend ready on"
"""The line the backend prints once it serves; its last word is the address."""

START_TIMEOUT_S = 30.0
"""Longest wait for the backend's ready line."""

REPO_ROOT = Path(__file__).resolve().parents[1]

LOOPBACK = "127.0.0.1"
"""The only interface the backend listens on."""

logger = logging.getLogger(__name__)

cli = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


class LoopbackBackend(InMemoryOrchestrationBackend):
    """durabletask's in-memory backend, listening on :data:`LOOPBACK` only.

    The SDK's own ``start`` listens on every interface (``[::]``), and its gRPC service has no
    authentication: anyone who reaches the machine could read every orchestration and raise events into
    them (a forged step response). This serves the same service on the loopback interface; the rest is
    the SDK's (durabletask 1.12, pinned in requirements-dev.txt).
    """

    def start(self) -> str:
        """Serve on ``127.0.0.1:<port>`` and return that address.

        Raises:
            RuntimeError: the port could not be bound.
        """
        self._shutdown_event.clear()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=10))
        self._server = server
        stubs.add_TaskHubSidecarServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        address = f"{LOOPBACK}:{self._port}"
        if server.add_insecure_port(address) == 0:
            raise RuntimeError(f"durabletask backend: cannot listen on {address}")
        server.start()
        return address


def free_port() -> int:
    """A free loopback TCP port (bound and released; fine for a child we start right away)."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def serve_backend(port: int) -> LoopbackBackend:
    """durabletask's in-memory backend, started on ``127.0.0.1:<port>`` (:class:`LoopbackBackend`)."""
    backend = LoopbackBackend(port=port)
    backend.start()
    return backend


class BackendProcess:
    """The backend as a child process of this devhost.

    Args:
        port: Loopback port the backend serves on.
        start_timeout_s: Longest wait for it to be ready.
    """

    def __init__(self, port: int, *, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.port = port
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[str] | None = None

    def __repr__(self) -> str:
        pid = self.process.pid if self.process is not None else None
        return f"BackendProcess(port={self.port}, pid={pid})"

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, for the durabletask worker and client."""
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> str:
        """Start the backend and wait for its ready line.

        Returns:
            Its address (:attr:`address`).

        Raises:
            RuntimeError: it exited, or was not ready within ``start_timeout_s`` (then it is killed).
        """
        process = subprocess.Popen(
            [sys.executable, "-m", "devhost.durabletask_backend", "--port", str(self.port)],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.process = process  # first: stop() must find a backend whose start was interrupted
        assert process.stdout is not None
        stdout = process.stdout
        first: list[str] = []
        ready = threading.Event()

        def read_ready() -> None:
            for line in stdout:
                if READY in line:
                    first.append(line)
                    ready.set()
                    break
            ready.set()
            _drain(stdout)  # so the child never blocks on a full pipe

        threading.Thread(target=read_ready, name="durabletask-backend-stdout", daemon=True).start()
        if not ready.wait(self.start_timeout_s):
            self.stop(timeout_s=0)
            raise RuntimeError(f"the durabletask backend was not ready within {self.start_timeout_s:g} s")
        if not first:
            code = process.wait()
            self.process = None
            raise RuntimeError(f"the durabletask backend exited with {code} before it was ready")
        return self.address

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close the backend's standard input (it stops), wait for it, kill it if it lingers. Idempotent."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("the durabletask backend (pid %s) did not stop: killed", process.pid)
            process.kill()
            process.wait()


def _drain(stream: IO[str]) -> None:
    for _ in stream:
        pass


def _set_at_end_of_input(done: threading.Event) -> None:
    """Set ``done`` once standard input ends: the devhost closed it, or has gone."""
    sys.stdin.read()
    done.set()


@cli.command()
def main(port: Annotated[int, typer.Option(help="gRPC port to listen on.")]) -> None:
    """Serve durabletask's in-memory backend until SIGTERM or the end of standard input."""
    # Its own log lines (one per event raised, at INFO) would cost more than they tell.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    done = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    # A terminal's Ctrl-C reaches the whole process group: the devhost stops its worker first and then
    # this backend, through the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_set_at_end_of_input, args=(done,), daemon=True).start()
    backend = serve_backend(port)
    settle_heap()
    print(f"{READY} {LOOPBACK}:{port}", flush=True)
    done.wait()
    backend.stop(grace=1.0)


if __name__ == "__main__":
    cli()
