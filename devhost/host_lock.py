"""One live local host process per host id and storage account: a lock the kernel releases when it dies.

A host id names a devhost process's response queue (``agent-responses-<host id>``), and only the process
that started an orchestration knows it (docs/design.md §1, local topology). Two live processes under one
host id against one storage account would consume each other's agent responses and drop them as
``unknown_instance``; so :func:`acquire_host_id` lets only one of them start. The lock is an
``fcntl.flock`` on a file in the machine's temporary directory, named by a digest of the host id and the
queue service endpoint it serves: two unrelated systems that happen to use one host id against different
emulators (parallel test workers, each with its own Azurite) never meet. The holder writes its pid into
the file, so a refusal can name it.

The kernel releases the lock when the holder's last descriptor closes, however it ends: a SIGKILLed
process restarted under its host id (``make demo KILL_EVERY=...``, ``make chaos``) takes it again at once.
The descriptor is close-on-exec and the devhost forks no children without exec, so no child inherits it.
The file itself stays: removing it could let a newcomer lock a fresh file while the holder keeps the old
one.

Linux and macOS only (``fcntl``), as the local host already is (its wake-up channel).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

LOCK_PREFIX: Final = "orderflow-host-"
"""Start of each lock file's name; the rest is :func:`lock_name`'s digest and ``.lock``."""

HOLDER_READ_S: Final = 0.5
"""Seconds a refused process waits for the holder's pid to appear (the holder writes it just after it
locks), before it says the holder is unknown."""


class HostIdInUse(RuntimeError):
    """Another live process holds the host id against the same storage endpoint.

    Attributes:
        host_id: The host id asked for.
        endpoint: The queue service endpoint it serves.
        holder: The holder's pid as it wrote it, or None when it could not be read.
        path: The lock file.
    """

    def __init__(self, host_id: str, endpoint: str, holder: int | None, path: Path) -> None:
        who = f"process {holder}" if holder is not None else "another process"
        super().__init__(
            f"host id {host_id!r} is in use by {who} on this machine against {endpoint} (lock {path}); "
            "stop that process or choose another --host-id"
        )
        self.host_id = host_id
        self.endpoint = endpoint
        self.holder = holder
        self.path = path


def lock_name(host_id: str, endpoint: str) -> str:
    """The lock file's name for ``host_id`` serving the queue service at ``endpoint``:
    ``orderflow-host-<32 hex digits>.lock``, the same for every spelling of one endpoint
    (:func:`canonical_endpoint`)."""
    key = f"{host_id}\n{canonical_endpoint(endpoint)}".encode()
    return f"{LOCK_PREFIX}{hashlib.sha256(key).hexdigest()[:32]}.lock"


def canonical_endpoint(endpoint: str) -> str:
    """One spelling of a queue service endpoint: ``scheme://address:port/path`` with the host resolved
    to its sorted addresses and every loopback address (``localhost``, ``127.1``, ``[::1]``) written
    ``loopback``, so that no spelling of one service escapes another's lock. A host that does not
    resolve is kept as written, in lower case."""
    parts = urlsplit(endpoint.strip())
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    host = (parts.hostname or "").lower()
    return f"{scheme}://{_address(host)}:{port}{parts.path.rstrip('/')}"


def _address(host: str) -> str:
    try:
        found = {str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return host
    addresses = {"loopback" if ipaddress.ip_address(a.split("%")[0]).is_loopback else a for a in found}
    return ",".join(sorted(addresses)) or host


class HostIdLock:
    """A held host id; :meth:`release` it when the process stops (the kernel does if it dies first).

    Args:
        path: The lock file.
        fd: Its descriptor, holding the ``flock``.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def __repr__(self) -> str:
        return f"HostIdLock({str(self.path)!r}, held={self._fd is not None})"

    def release(self) -> None:
        """Let another process take the host id (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the flock


def acquire_host_id(host_id: str, endpoint: str, *, directory: Path | None = None) -> HostIdLock:
    """Take the host id for this process, or refuse at once if a live process holds it.

    Args:
        host_id: This process's host id.
        endpoint: The queue service endpoint (URL) its response queue lives on.
        directory: Where the lock files are (default: the machine's temporary directory).

    Returns:
        The held lock, with this process's pid written in its file.

    Raises:
        HostIdInUse: another live process holds it; the error names its pid.
        OSError: the lock file cannot be opened.
    """
    path = Path(tempfile.gettempdir() if directory is None else directory) / lock_name(host_id, endpoint)
    # O_NOFOLLOW: a link planted at the lock's name in a shared temporary directory is not followed.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise HostIdInUse(host_id, endpoint, holder, path) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return HostIdLock(path, fd)


def _holder(fd: int) -> int | None:
    """The pid the holder wrote in the lock file, waiting up to :data:`HOLDER_READ_S` for it."""
    deadline = time.monotonic() + HOLDER_READ_S
    while True:
        with contextlib.suppress(IndexError, ValueError, OSError):
            return int(os.pread(fd, 32, 0).split()[0])
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)
