"""Start and stop the local emulators: Azurite (queues, blobs) and cosmosdb-server (Cosmos DB API).

Both come from the repository's ``node_modules`` (``npm ci``); nothing is installed by hand.
Each emulator listens on a free loopback port chosen by the operating system (port 0) and
reports it on stdout, so parallel test sessions and demo runs never collide.

cosmosdb-server is launched through ``devhost/cosmosdb_server.js`` because only its library API
enables HTTP keep-alive, which makes it roughly 18x faster for the azure-cosmos SDK (docs/design.md §8).
It keeps data in memory only: stopping it loses every record.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devhost.cli import SERVER_STOP_SIGNALS, one_line, print_error, stop_signals_interrupt

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
NODE_BIN = REPO_ROOT / "node_modules" / ".bin"

# The documented, public development account of Azurite and the Cosmos DB emulator. Not a secret.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
COSMOS_EMULATOR_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
)

INSTALL_HINT = "run `npm ci` in the repository root (or `make setup`) to install the emulators"


class EmulatorError(RuntimeError):
    """An emulator is missing or did not report that it was listening in time."""


@dataclass
class EmulatorProcess:
    """A running emulator process and the ports it reported.

    Attributes:
        name: ``azurite`` or ``cosmosdb-server``.
        process: The child process.
        ports: Service name (``blob``, ``queue``, ``table``, ``cosmos``) to loopback port.
    """

    name: str
    process: subprocess.Popen[str]
    ports: dict[str, int] = field(default_factory=dict)
    workdir: Path | None = None

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): it keeps its in-memory data but answers nothing."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Thaw a paused process (SIGCONT)."""
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate the process (SIGTERM, then SIGKILL after ``timeout_s`` seconds)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass(frozen=True)
class LocalEndpoints:
    """Where the local emulators listen.

    Attributes:
        storage_connection_string: Azurite connection string (blob and queue endpoints).
        cosmos_endpoint: ``https://127.0.0.1:PORT/`` of cosmosdb-server (self-signed certificate).
        cosmos_key: The emulator's well-known account key.
    """

    storage_connection_string: str
    cosmos_endpoint: str
    cosmos_key: str = COSMOS_EMULATOR_KEY


def azurite_connection_string(blob_port: int, queue_port: int) -> str:
    """Build the Azurite development connection string for the given loopback ports."""
    return (
        "DefaultEndpointsProtocol=http;"
        f"AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{blob_port}/{AZURITE_ACCOUNT};"
        f"QueueEndpoint=http://127.0.0.1:{queue_port}/{AZURITE_ACCOUNT};"
    )


def _node_tool(name: str) -> Path:
    path = NODE_BIN / name
    if not path.exists():
        raise EmulatorError(f"{path} not found: {INSTALL_HINT}")
    return path


def _wait_for_lines(
    proc: subprocess.Popen[str], patterns: dict[str, re.Pattern[str]], timeout_s: float, name: str
) -> dict[str, int]:
    """Read the child's stdout until every pattern has matched; return the captured ports."""
    found: dict[str, int] = {}
    seen: list[str] = []
    done = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line.rstrip())
            for key, pattern in patterns.items():
                match = pattern.search(line)
                if match and key not in found:
                    found[key] = int(match.group(1))
            if len(found) == len(patterns):
                done.set()
        done.set()

    # Keep draining stdout after start-up so the child never blocks on a full pipe.
    threading.Thread(target=reader, name=f"{name}-stdout", daemon=True).start()
    try:
        ready = done.wait(timeout_s) and len(found) == len(patterns)
    except BaseException:
        # Interrupted (Ctrl-C, or a stop signal) while waiting: the child is in a session of its own,
        # so nothing else would ever stop it.
        proc.kill()
        proc.wait()
        raise
    if not ready:
        proc.kill()
        proc.wait()
        tail = "\n".join(seen[-20:])
        raise EmulatorError(f"{name} did not start within {timeout_s:.0f} s; output:\n{tail}")
    return found


def start_azurite(*, timeout_s: float = 30.0) -> EmulatorProcess:
    """Start Azurite (blob and queue services, in memory) on free loopback ports.

    Returns:
        The running process, with ``ports['blob']`` and ``ports['queue']``.

    Raises:
        EmulatorError: Azurite is not installed or did not start within ``timeout_s`` seconds.
    """
    exe = _node_tool("azurite")
    workdir = Path(tempfile.mkdtemp(prefix="orderflow-azurite-"))
    proc = subprocess.Popen(
        [
            str(exe),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
            "--silent",
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            "0",
            "--queueHost",
            "127.0.0.1",
            "--queuePort",
            "0",
            "--tableHost",
            "127.0.0.1",
            "--tablePort",
            "0",
            "--queueKeepAliveTimeout",
            "60",
            "--blobKeepAliveTimeout",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=workdir,
        start_new_session=True,
    )
    try:
        ports = _wait_for_lines(
            proc,
            {
                "blob": re.compile(r"Blob service is successfully listening at http://[^:]+:(\d+)"),
                "queue": re.compile(r"Queue service is successfully listening at http://[^:]+:(\d+)"),
            },
            timeout_s,
            "azurite",
        )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    logger.info("azurite listening: blob=%s queue=%s", ports["blob"], ports["queue"])
    return EmulatorProcess("azurite", proc, ports, workdir)


def start_cosmosdb_server(*, timeout_s: float = 30.0) -> EmulatorProcess:
    """Start cosmosdb-server over HTTPS with keep-alive on a free loopback port.

    Returns:
        The running process, with ``ports['cosmos']``.

    Raises:
        EmulatorError: the package is not installed or the server did not start in time.
    """
    _node_tool("cosmosdb-server")
    node = shutil.which("node")
    if node is None:
        raise EmulatorError("node is not on PATH; install Node.js 20 or newer")
    proc = subprocess.Popen(
        [node, str(Path(__file__).with_name("cosmosdb_server.js")), "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    ports = _wait_for_lines(proc, {"cosmos": re.compile(r"listening (\d+)")}, timeout_s, "cosmosdb-server")
    logger.info("cosmosdb-server listening on %s", ports["cosmos"])
    return EmulatorProcess("cosmosdb-server", proc, ports)


@dataclass
class LocalEmulators:
    """Both emulators, started together; use as a context manager."""

    azurite: EmulatorProcess
    cosmos: EmulatorProcess

    @property
    def endpoints(self) -> LocalEndpoints:
        """Connection details for the running emulators."""
        return LocalEndpoints(
            storage_connection_string=azurite_connection_string(
                self.azurite.ports["blob"], self.azurite.ports["queue"]
            ),
            cosmos_endpoint=f"https://127.0.0.1:{self.cosmos.ports['cosmos']}/",
        )

    def stop(self) -> None:
        """Stop both emulators; data is lost."""
        self.cosmos.stop()
        self.azurite.stop()

    def __enter__(self) -> LocalEmulators:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_local_emulators() -> LocalEmulators:
    """Start Azurite and cosmosdb-server; stop whichever started if the other fails."""
    azurite = start_azurite()
    try:
        cosmos = start_cosmosdb_server()
    except BaseException:
        azurite.stop()
        raise
    emulators = LocalEmulators(azurite, cosmos)
    try:
        # A little settling time: both print before the first request is fully served on slow machines.
        time.sleep(0.1)
    except BaseException:
        emulators.stop()  # interrupted here: nobody holds them yet, and they run in sessions of their own
        raise
    return emulators


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m devhost.emulators``: start both emulators, print the settings to export, wait.

    Runs until SIGINT, SIGTERM or SIGHUP, then stops both (their data is in memory and is lost).

    Args:
        argv: The arguments without the program name (there are none but ``--help``); None reads
            ``sys.argv``.

    Returns:
        The exit status: 0 once stopped by a signal; 1, after one line on stderr, when an emulator is
        missing or did not start.

    Raises:
        SystemExit: 2 for any argument (argparse's message); 0 after ``--help``.
    """
    parser = argparse.ArgumentParser(
        prog="python -m devhost.emulators",
        description="Start Azurite and cosmosdb-server on free loopback ports, print the settings to "
        "export, and run until Ctrl-C (or SIGTERM/SIGHUP).",
    )
    parser.parse_args(argv)  # takes no options: an unknown one is refused, not ignored
    with stop_signals_interrupt(SERVER_STOP_SIGNALS) as signals:
        try:
            emulators = start_local_emulators()
        except EmulatorError as exc:
            print_error(one_line(exc))
            return 1
        except KeyboardInterrupt:
            return 0  # stopped while starting: whatever had started is stopped already
        try:
            endpoints = emulators.endpoints
            print("# Local emulators are running. In each shell that runs orderflow, export:", flush=True)
            print(f"export STORAGE_CONNECTION_STRING='{endpoints.storage_connection_string}'")
            print(f"export COSMOS_ENDPOINT='{endpoints.cosmos_endpoint}'")
            print(f"export COSMOS_KEY='{endpoints.cosmos_key}'")
            print("export COSMOS_VERIFY_TLS=false")
            print("# Ctrl-C stops both emulators (their data lives in memory only).", flush=True)
            signals.wait()  # until a signal raises
        except KeyboardInterrupt:
            pass
        finally:
            signals.ignore_more()  # a second signal must not leave one emulator running
            emulators.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
