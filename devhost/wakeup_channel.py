"""Wake-ups across the devhost processes of one machine: a send in one process ends an idle poll in another.

Each process binds a Unix datagram socket and leaves a file ``<WAKEUP_DIR>/<host id>.sock`` naming it.
The socket is in Linux's abstract namespace, at an address derived from that file's path, so a
directory deep enough to break the 108-byte limit of a socket path (a test's temporary folder, a run
folder in a deep checkout) still works. When it sends to a queue it sends the queue's name (or another
wake-up's, such as the starter's ``@starter``, which no queue name can be), as one datagram, to the
socket of every other file in the directory; a process receiving a name sets its
:class:`~devhost.loops.Wakeups` event, and that queue's idle consumer loop receives at once instead of at
its next poll. The queue stays the only source of truth: a datagram carries no message, and one that is
lost (a process starting, a full socket buffer) only leaves that hop to the next poll. Sends never block
(a full peer is skipped) and a socket whose process has gone is forgotten.

The Azure host has no such thing: Service Bus triggers receive each message as it arrives.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

SUFFIX = ".sock"
MAX_NAME_BYTES = 255
RESCAN_S = 1.0
"""Seconds between scans of the directory for processes started since (a restarted process)."""


def socket_address(path: Path) -> str:
    """The abstract-namespace address of the socket that the file ``path`` names: a fixed prefix and a
    digest of the absolute path, well under the 108-byte limit whatever the path's length."""
    digest = hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:40]
    return f"\0orderflow-wakeup-{digest}"


class WakeupSocketInUse(RuntimeError):
    """Another live process has bound the wake-up socket of this host id in this directory."""


class WakeupChannel:
    """This process's end of the shared wake-up directory.

    Args:
        directory: The directory every devhost process of the machine shares (created if missing).
        host_id: This process's host id (its socket's name).
        on_name: Called with each queue name another process announces (from the channel's thread).
    """

    def __init__(self, directory: Path, host_id: str, on_name: Callable[[str], None]) -> None:
        self.directory = directory
        self.path = directory / f"{host_id}{SUFFIX}"
        self._on_name = on_name
        self._socket: socket.socket | None = None
        self._out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._out.setblocking(False)
        self._peers: list[str] = []
        self._scanned_at = float("-inf")
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="wakeup-channel", daemon=True)

    def __repr__(self) -> str:
        return f"WakeupChannel({str(self.path)!r})"

    def start(self) -> None:
        """Bind this process's socket, write its file (a stale one of the same host id is replaced: the
        kernel freed the address of a process that died) and start listening.

        Raises:
            WakeupSocketInUse: a live process has bound this host id's socket in this directory (its file
                and socket are left alone).
            OSError: the directory cannot be made, the socket bound otherwise, or the file written (the
                socket is then closed).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            listening.bind(socket_address(self.path))
        except OSError as exc:
            listening.close()
            if exc.errno == errno.EADDRINUSE:
                raise WakeupSocketInUse(
                    f"the wake-up socket {self.path} is bound by another live process with this host id"
                ) from None
            raise
        try:
            self._write_file()
        except OSError:
            listening.close()
            raise
        self._socket = listening
        self._thread.start()

    def _write_file(self) -> None:
        """Make this process's file anew: whatever has its name goes first (the address is this
        process's now), and the file is created only where it is, never through a link left there."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))

    def stop(self) -> None:
        """Stop listening and remove this process's socket."""
        listening, self._socket = self._socket, None
        if listening is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            # Unblocks the reader's recv: shutdown wakes it on Linux, close alone may not.
            with contextlib.suppress(OSError):
                listening.shutdown(socket.SHUT_RDWR)
            listening.close()
        self._out.close()

    def announce(self, name: str) -> int:
        """Tell every other process that a message was sent to queue ``name``; returns how many were told."""
        data = name.encode("utf-8")[:MAX_NAME_BYTES]
        told = 0
        for peer in self._current_peers():
            try:
                self._out.sendto(data, peer)
                told += 1
            except (BlockingIOError, InterruptedError):
                continue  # its buffer is full: it is busy receiving already
            except OSError:
                self._forget(peer)  # its process has gone (its file stays after a SIGKILL)
        return told

    def _current_peers(self) -> list[str]:
        with self._lock:
            if time.monotonic() - self._scanned_at >= RESCAN_S:
                self._scanned_at = time.monotonic()
                try:
                    names = os.listdir(self.directory)
                except OSError:
                    names = []
                mine = self.path.name
                self._peers = [
                    socket_address(self.directory / n) for n in names if n.endswith(SUFFIX) and n != mine
                ]
            return list(self._peers)

    def _forget(self, peer: str) -> None:
        with self._lock:
            if peer in self._peers:
                self._peers.remove(peer)

    def _run(self) -> None:
        while True:
            listening = self._socket
            if listening is None:
                return
            try:
                data = listening.recv(MAX_NAME_BYTES)
            except OSError:
                return
            if not data:
                if self._socket is None:
                    return
                continue
            try:
                self._on_name(data.decode("utf-8", "replace"))
            except Exception:
                logger.exception("wake-up for %r failed", data)
