"""Wake-ups across the devhost processes of one machine: a send in one process ends an idle poll in another.

Each process binds a Unix datagram socket and leaves a file ``<WAKEUP_DIR>/<host id>.sock`` naming it.
The socket is in Linux's abstract namespace, so a directory deep enough to break the 108-byte limit of
a socket path (a test's temporary folder, a run folder in a deep checkout) still works. Its address is
random, written into the file (readable by this user only): another local user cannot bind it first to
keep a devhost from starting, as a name derived from the path would let them. When it sends to a queue
it sends the queue's name (or another wake-up's, such as the starter's ``@starter``, which no queue name
can be), as one datagram, to the socket every other file in the directory names; a process receiving a
name sets its :class:`~devhost.loops.Wakeups` event, and that queue's idle consumer loop receives at once
instead of at its next poll. A datagram is taken only from a process of this user (the kernel's
``SCM_CREDENTIALS``): an abstract address is listed in ``/proc/net/unix`` for anyone to send to. The
queue stays the only source of truth: a datagram carries no message, and one that is lost (a process
starting, a full socket buffer) only leaves that hop to the next poll. Sends never block (a full peer is
skipped) and a socket whose process has gone is forgotten.

The Azure host has no such thing: Service Bus triggers receive each message as it arrives.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

SUFFIX = ".sock"
MAX_NAME_BYTES = 255
RESCAN_S = 1.0
"""Seconds between scans of the directory for processes started since (a restarted process)."""


ADDRESS_PREFIX = "\0orderflow-wakeup-"
"""Every wake-up socket's abstract address starts so; a random token follows."""

_CREDENTIALS = struct.Struct("3i")
"""``struct ucred``: the sender's pid, uid and gid, as ``SCM_CREDENTIALS`` carries them."""


def new_address() -> str:
    """A fresh abstract-namespace address: :data:`ADDRESS_PREFIX` and 32 random hex digits."""
    return f"{ADDRESS_PREFIX}{secrets.token_hex(16)}"


def read_address(path: Path) -> str | None:
    """The address the file ``path`` names, or None when it names none (missing, unreadable, empty or
    not a wake-up address: a file being written, or one left by something else)."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    address = "\0" + text.strip()
    return address if address.startswith(ADDRESS_PREFIX) and len(address) > len(ADDRESS_PREFIX) else None


def sender_uid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The sender's uid from a datagram's ancillary data (``SCM_CREDENTIALS``), None when it has none."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _CREDENTIALS.size:
            return int(_CREDENTIALS.unpack_from(data)[1])
    return None


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
        """Bind this process's socket at a new random address, write its file (one left by a process of
        this host id that died is replaced) and start listening.

        Raises:
            WakeupSocketInUse: a live process listens at the address this host id's file names (its file
                and socket are left alone).
            OSError: the directory cannot be made, the socket bound, or the file written (the socket is
                then closed).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            if self._is_live(read_address(self.path)):
                raise WakeupSocketInUse(
                    f"the wake-up socket {self.path} is bound by another live process with this host id"
                )
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            address = new_address()
            listening.bind(address)
            self._write_file(address)
        except BaseException:
            listening.close()
            raise
        self._socket = listening
        self._thread.start()

    def _is_live(self, address: str | None) -> bool:
        """Whether a process listens at ``address`` (an empty datagram, which a listener ignores)."""
        if address is None:
            return False
        try:
            self._out.sendto(b"", address)
        except BlockingIOError:
            return True  # its buffer is full: alive and busy
        except OSError:
            return False  # nobody is bound there: its process has gone
        return True

    def _write_file(self, address: str) -> None:
        """Write this process's file anew, readable by this user only: the content goes to a new file
        beside it, renamed over whatever has the name (a rename replaces a link, never follows it), so a
        peer reads the old address or the new one, never half of one."""
        staging = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(descriptor, "w", encoding="ascii") as file:
                file.write(address.removeprefix("\0"))
            os.replace(staging, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                staging.unlink()
            raise

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
                found = (
                    read_address(self.directory / n)
                    for n in names
                    if n.endswith(SUFFIX) and not n.startswith(".") and n != mine
                )
                self._peers = [address for address in found if address is not None]
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
                data, ancillary, _flags, _sender = listening.recvmsg(
                    MAX_NAME_BYTES, socket.CMSG_SPACE(_CREDENTIALS.size)
                )
            except OSError:
                return
            if not data:
                if self._socket is None:
                    return
                continue
            if sender_uid(ancillary) != os.getuid():
                continue  # another user's process: it may not wake this one
            try:
                self._on_name(data.decode("utf-8", "replace"))
            except Exception:
                logger.exception("wake-up for %r failed", data)
