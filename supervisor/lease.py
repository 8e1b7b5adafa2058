"""Leader election for local supervisors: one blob lease, one leader, stand-bys that take over.

On Azure the supervisor is a timer trigger, and timer triggers run as a singleton per app
(docs/design.md §1), so it uses :class:`NoLease`. Local devhost processes each run a supervisor loop;
they elect a leader through an Azure Storage blob lease (Azurite locally, the same code on a storage
account). The lease is an *efficiency* device only: every recovery write is conditional on the ETag the
supervisor read (docs/design.md §3.5), so two supervisors that both believe they lead still recover each
record at most once. The lease just keeps them from doing the same work twice.

Lease semantics relied on, from the Azure Storage "Lease Blob" REST API
(https://learn.microsoft.com/rest/api/storageservices/lease-blob) and the ``BlobLeaseClient`` of
azure-storage-blob:

- **acquire** with a proposed lease id succeeds when the blob has no active lease, or when its active
  lease has that same id (which restarts the period); otherwise 409 ``LeaseAlreadyPresent``. The
  duration is 15 to 60 seconds, or infinite (-1); an infinite lease never expires, so a dead leader
  would never be replaced, and is not allowed here.
- **renew** restarts the period of the caller's lease. An expired lease can still be renewed as long as
  the blob has not been leased again (or modified) since; once another client acquired it, renew fails
  with 409 ``LeaseIdMismatchWithLeaseOperation``.
- **release** ends the lease at once, so another client may acquire it immediately (hand-over on a clean
  shutdown); releasing a lease that is no longer ours answers 409, which is harmless.

The local expiry guard. The service starts a lease's period when it *processes* the request, which is
after we sent it; so a period measured locally from the moment the request was *sent* ends no later than
the service's. On top of that, a leader considers itself not-leader once
``now > sent_at + duration - safety_margin``. The margin covers what the send-time bound does not: clock
*rate* differences between this machine and the service (ppm), the service's own expiry granularity, and
the time between checking :attr:`is_leader` and acting on it. So a leader that cannot renew (storage
unreachable, process paused before the check) stops acting as leader *before* the service lets anyone
else acquire the lease. A leader renews every ``renew_every_s`` (a third of the period by default), so
two renewals fit before the local guard ends its term and one failed renewal costs nothing.

Take-over latency: a stand-by acquires at its first attempt after the service-side lease expires, which
is at most one lease period after the dead leader's last successful renewal, plus the stand-by's own
polling interval. A leader that stops cleanly releases the lease, and the next attempt of a stand-by wins.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential, TokenCredential
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobClient, BlobLeaseClient, ContainerClient, ExponentialRetry

from orderflow.errors import OrderflowError, PermanentError, TransientError

logger = logging.getLogger(__name__)

MIN_LEASE_S = 15
"""Shortest finite blob lease the Storage service grants, in seconds."""

MAX_LEASE_S = 60
"""Longest finite blob lease the Storage service grants, in seconds."""

Monotonic = Callable[[], float]
"""A monotonic clock in seconds (``time.monotonic``); injectable so tests can move time."""


class SupervisorLease(Protocol):
    """What a supervisor loop needs from leader election.

    Implementations: :class:`LeaderLease` (a blob lease), :class:`InMemoryLease` (tests),
    :class:`NoLease` (always leader).
    """

    @property
    def is_leader(self) -> bool:
        """Whether this process may act as leader now (a local check, no I/O)."""
        ...

    @property
    def renew_every_s(self) -> float:
        """Seconds between renewals; a loop must call :meth:`maintain` at least this often."""
        ...

    def acquire(self) -> bool:
        """Try once, without waiting, to become leader; True when this process now leads."""
        ...

    def renew(self) -> bool:
        """Renew a held lease; False when it is no longer ours."""
        ...

    def release(self) -> None:
        """Give leadership up at once so that a stand-by can take over."""
        ...

    def maintain(self) -> bool:
        """Renew when due, or try to acquire when not leader; return :attr:`is_leader`."""
        ...


class NoLease:
    """Always the leader: election disabled, or a host that is a singleton already (Azure timers)."""

    def __repr__(self) -> str:
        return "NoLease()"

    @property
    def is_leader(self) -> bool:
        """Always True."""
        return True

    @property
    def renew_every_s(self) -> float:
        """Infinite: there is nothing to renew."""
        return math.inf

    def acquire(self) -> bool:
        """Always True."""
        return True

    def renew(self) -> bool:
        """Always True."""
        return True

    def release(self) -> None:
        """Nothing to release."""

    def maintain(self) -> bool:
        """Always True."""
        return True


class _GuardedLease(ABC):
    """The local expiry guard and renewal schedule shared by the blob lease and its in-memory twin.

    Subclasses implement the three remote operations; this class decides when to call them and whether
    this process is leader. Thread-safe: one lock serialises the operations (they are rare).

    Args:
        duration_s: Lease period in seconds, 15 to 60.
        renew_every_s: Seconds between renewals (default: a third of the period).
        safety_margin_s: Seconds before the locally computed expiry at which leadership ends (default:
            a fifth of the period).
        monotonic: Local monotonic clock, seconds.
        lease_id: This elector's lease id (default: a new UUID; the service requires GUID format).

    Raises:
        ValueError: the period is outside 15-60 s, or the renewal interval and margin leave no time to
            renew before the local guard ends the term.
    """

    def __init__(
        self,
        *,
        duration_s: int = MIN_LEASE_S,
        renew_every_s: float | None = None,
        safety_margin_s: float | None = None,
        monotonic: Monotonic = time.monotonic,
        lease_id: str | None = None,
    ) -> None:
        if not MIN_LEASE_S <= duration_s <= MAX_LEASE_S:
            raise ValueError(f"lease duration must be {MIN_LEASE_S}-{MAX_LEASE_S} s, got {duration_s}")
        self.duration_s = duration_s
        self._renew_every_s = duration_s / 3 if renew_every_s is None else renew_every_s
        self.safety_margin_s = duration_s / 5 if safety_margin_s is None else safety_margin_s
        if self.safety_margin_s <= 0 or self._renew_every_s <= 0:
            raise ValueError("renew_every_s and safety_margin_s must be positive")
        if self._renew_every_s >= duration_s - self.safety_margin_s:
            raise ValueError(
                f"renew_every_s ({self._renew_every_s}) must be shorter than the guarded term "
                f"({duration_s} - {self.safety_margin_s} s)"
            )
        self.lease_id = lease_id or str(uuid.uuid4())
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._held = False  # the last acquire or renew succeeded and nothing since says otherwise
        self._valid_until = -math.inf  # local end of the term: sent_at + duration - margin
        self._renew_at = math.inf

    # --- the remote side ----------------------------------------------------------------------
    @abstractmethod
    def _remote_acquire(self) -> bool:
        """Acquire (or re-acquire) the lease with :attr:`lease_id`; False when another holds it."""

    @abstractmethod
    def _remote_renew(self) -> bool:
        """Renew the lease with :attr:`lease_id`; False when it is not ours any more."""

    @abstractmethod
    def _remote_release(self) -> None:
        """Release the lease with :attr:`lease_id`; a lease that is not ours is not an error."""

    # --- the public operations ------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """Whether this process holds the lease and its local term has not run out (no I/O)."""
        with self._lock:
            return self._held and self._monotonic() < self._valid_until

    @property
    def renew_every_s(self) -> float:
        """Seconds between renewals."""
        return self._renew_every_s

    def _started(self, sent_at: float) -> None:
        self._held = True
        self._valid_until = sent_at + self.duration_s - self.safety_margin_s
        self._renew_at = sent_at + self._renew_every_s

    def _lost(self) -> None:
        self._held = False
        self._valid_until = -math.inf
        self._renew_at = math.inf

    def acquire(self) -> bool:
        """Try once to acquire the lease; never waits for another holder.

        Returns:
            True when this process is now leader.

        Raises:
            TransientError: the lease service is unreachable or failed; leadership is unchanged (a
                held lease still ends at its local expiry).
            PermanentError: the service refused the request (authorisation, bad configuration).
        """
        with self._lock:
            sent_at = self._monotonic()
            if self._remote_acquire():
                was_held = self._held
                self._started(sent_at)
                if not was_held:
                    logger.info("supervisor lease %s acquired: this process leads", self.lease_id)
                return True
            if self._held:
                logger.warning("supervisor lease %s was taken over by another process", self.lease_id)
            self._lost()
            return False

    def renew(self) -> bool:
        """Renew the held lease, restarting its period.

        Returns:
            True when the lease is (still) ours; False when it was not held or another process has it.

        Raises:
            TransientError: the lease service is unreachable or failed; the term still ends at its
                local expiry unless a later renewal succeeds.
            PermanentError: the service refused the request.
        """
        with self._lock:
            if not self._held:
                return False
            sent_at = self._monotonic()
            if self._remote_renew():
                self._started(sent_at)
                return True
            logger.warning("supervisor lease %s lost: another process leads", self.lease_id)
            self._lost()
            return False

    def release(self) -> None:
        """Stop leading now and release the lease so a stand-by can acquire it at once.

        Local leadership ends before the request is sent, so a failed release never leaves this process
        acting as leader; the service-side lease then simply expires.

        Raises:
            TransientError: the lease service is unreachable or failed.
            PermanentError: the service refused the request.
        """
        with self._lock:
            if not self._held:
                return
            self._lost()
            self._remote_release()
            logger.info("supervisor lease %s released", self.lease_id)

    def maintain(self) -> bool:
        """One election step for a loop: renew when due, or try to acquire when not leader.

        A :class:`TransientError` is logged and swallowed: a leader stays leader until its local term
        runs out, a stand-by stays stand-by, and the next call tries again.

        Returns:
            :attr:`is_leader` after the step.

        Raises:
            PermanentError: the service refused the request (a configuration problem worth failing on).
        """
        try:
            with self._lock:
                held, due = self._held, self._monotonic() >= self._renew_at
            if held and not due:
                return self.is_leader
            if not (held and self.renew()):
                self.acquire()
        except TransientError as exc:
            logger.warning("supervisor lease %s: %s", self.lease_id, exc.detail)
        return self.is_leader


def split_blob_path(path: str) -> tuple[str, str]:
    """Split ``container/blob`` into its container and blob names.

    Raises:
        ValueError: there is no ``/`` or either part is empty.
    """
    container, sep, blob = path.partition("/")
    if not sep or not container or not blob:
        raise ValueError(f"lease blob must be 'container/blob', got {path!r}")
    return container, blob


_LEASE_RETRY_TOTAL = 1
_LEASE_CONNECTION_TIMEOUT_S = 5
_LEASE_READ_TIMEOUT_S = 5


def _client_options() -> dict[str, Any]:
    # One quick SDK retry and short timeouts: a loop calls again within seconds anyway, and a retried
    # acquire or renew is safe because it carries the same lease id.
    return {
        "retry_policy": ExponentialRetry(
            initial_backoff=1, increment_base=2, retry_total=_LEASE_RETRY_TOTAL, random_jitter_range=1
        ),
        "connection_timeout": _LEASE_CONNECTION_TIMEOUT_S,
        "read_timeout": _LEASE_READ_TIMEOUT_S,
    }


def _translate(error: AzureError, action: str, where: str) -> OrderflowError:
    """Transport failures, timeouts, throttling and 5xx → TransientError; other statuses → PermanentError."""
    text = f"lease {action} on {where} failed: {error.message}"
    if isinstance(error, ServiceRequestError | ServiceResponseError):
        return TransientError(text)
    if isinstance(error, HttpResponseError):
        status = error.status_code
        if status is None or status >= 500 or status in (408, 429):
            return TransientError(text)
        code = getattr(error, "error_code", None)  # set by the Storage SDK, not by azure-core
        return PermanentError(str(getattr(code, "value", code) or f"http_{status}"), text)
    return TransientError(text)


def _is_conflict(error: AzureError) -> bool:
    return isinstance(error, HttpResponseError) and error.status_code == 409


class LeaderLease(_GuardedLease):
    """Leader election over an Azure Storage blob lease (Azurite locally).

    The container and the (empty) blob are created on first use when missing; creation races between
    processes are harmless. See the module docstring for the lease semantics and the local expiry guard.

    Args:
        container: The container holding the lease blob.
        blob_name: The lease blob's name.
        duration_s: Lease period in seconds, 15 to 60.
        renew_every_s: Seconds between renewals (default: a third of the period).
        safety_margin_s: Seconds before the local expiry at which leadership ends (default: a fifth).
        monotonic: Local monotonic clock, seconds.
        lease_id: This elector's lease id (default: a new UUID).
        holder: Metadata naming this elector (e.g. ``{"host": "demo-1", "pid": "4242"}``), written on the
            lease blob, under the lease, each time it acquires the lease, so operators and tools can see who
            leads (:func:`current_holder`). None (default): nothing is written.

    Raises:
        ValueError: see :class:`_GuardedLease`.
    """

    def __init__(
        self,
        container: ContainerClient,
        blob_name: str,
        *,
        duration_s: int = MIN_LEASE_S,
        renew_every_s: float | None = None,
        safety_margin_s: float | None = None,
        monotonic: Monotonic = time.monotonic,
        lease_id: str | None = None,
        holder: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            duration_s=duration_s,
            renew_every_s=renew_every_s,
            safety_margin_s=safety_margin_s,
            monotonic=monotonic,
            lease_id=lease_id,
        )
        self._container = container
        self.blob = container.get_blob_client(blob_name)
        self._lease = BlobLeaseClient(self.blob, lease_id=self.lease_id)
        self._where = f"{container.container_name}/{blob_name}"
        self._holder = dict(holder) if holder else None

    def __repr__(self) -> str:
        return f"LeaderLease(blob={self._where!r}, lease_id={self.lease_id!r}, duration_s={self.duration_s})"

    @classmethod
    def from_connection_string(cls, connection_string: str, blob_path: str, **options: Any) -> LeaderLease:
        """A lease on ``container/blob`` of the account in a connection string (Azurite's, locally).

        Args:
            connection_string: A storage connection string with a blob endpoint.
            blob_path: ``container/blob``.
            **options: Keyword arguments of :class:`LeaderLease` (``duration_s`` ...).

        Raises:
            ValueError: the connection string is empty or the path is not ``container/blob``.
        """
        if not connection_string:
            raise ValueError("a storage connection string is required for the supervisor lease")
        container_name, blob_name = split_blob_path(blob_path)
        container = ContainerClient.from_connection_string(
            connection_string, container_name, **_client_options()
        )
        return cls(container, blob_name, **options)

    @classmethod
    def from_account_url(
        cls,
        account_url: str,
        credential: TokenCredential | AzureNamedKeyCredential | AzureSasCredential,
        blob_path: str,
        **options: Any,
    ) -> LeaderLease:
        """A lease on ``container/blob`` of ``https://<account>.blob.core.windows.net``.

        Args:
            account_url: The blob service endpoint.
            credential: Normally a managed identity (``DefaultAzureCredential``).
            blob_path: ``container/blob``.
            **options: Keyword arguments of :class:`LeaderLease`.

        Raises:
            ValueError: the path is not ``container/blob``.
        """
        container_name, blob_name = split_blob_path(blob_path)
        container = ContainerClient(account_url, container_name, credential=credential, **_client_options())
        return cls(container, blob_name, **options)

    def _create_blob(self) -> None:
        """Create the container and the empty lease blob, tolerating creation by someone else."""
        with contextlib.suppress(ResourceExistsError):
            self._container.create_container()
        try:
            self.blob.upload_blob(b"", overwrite=False)
        except ResourceExistsError:
            pass
        except HttpResponseError as exc:
            # Created and leased by another process between our 404 and this upload.
            if exc.status_code != 412:
                raise

    def _remote_acquire(self) -> bool:
        try:
            try:
                self._lease.acquire(lease_duration=self.duration_s)
            except ResourceNotFoundError:
                self._create_blob()
                self._lease.acquire(lease_duration=self.duration_s)
        except AzureError as exc:
            if _is_conflict(exc):
                return False
            raise _translate(exc, "acquire", self._where) from exc
        self._write_holder()
        return True

    def _write_holder(self) -> None:
        """Name this elector in the blob's metadata; only the lease holder may write a leased blob."""
        if self._holder is None:
            return
        try:
            self.blob.set_blob_metadata(self._holder, lease=self._lease)
        except AzureError as exc:
            # Informational only: leadership stands whether or not the name was written.
            logger.warning("supervisor lease %s: could not record the holder: %s", self.lease_id, exc)

    def _remote_renew(self) -> bool:
        try:
            self._lease.renew()
        except AzureError as exc:
            # 409: another process holds the lease, or it was released or broken; 404: the blob is gone.
            if _is_conflict(exc) or isinstance(exc, ResourceNotFoundError):
                return False
            raise _translate(exc, "renew", self._where) from exc
        return True

    def _remote_release(self) -> None:
        try:
            self._lease.release()
        except AzureError as exc:
            if _is_conflict(exc) or isinstance(exc, ResourceNotFoundError):
                return
            raise _translate(exc, "release", self._where) from exc


def current_holder(connection_string: str, blob_path: str) -> dict[str, str] | None:
    """Who holds the lease on ``container/blob``: the metadata its holder wrote (``holder`` of
    :class:`LeaderLease`), or None when the blob is missing or not leased.

    Read without a lease. A holder that acquired a moment ago may not have written its name yet, and
    a holder that writes none leaves the last one's: the answer is for tools and operators, never for
    deciding who may act (only the lease itself decides that).

    Raises:
        ValueError: the path is not ``container/blob`` or the connection string is empty.
        TransientError / PermanentError: the service failed or refused the read.
    """
    if not connection_string:
        raise ValueError("a storage connection string is required to read the lease holder")
    container_name, blob_name = split_blob_path(blob_path)
    blob = BlobClient.from_connection_string(
        connection_string, container_name, blob_name, **_client_options()
    )
    try:
        properties = blob.get_blob_properties()
    except ResourceNotFoundError:
        return None
    except AzureError as exc:
        raise _translate(exc, "read", blob_path) from exc
    finally:
        blob.close()
    if properties.lease.state != "leased":
        return None
    return dict(properties.metadata or {})


class InMemoryLeaseBlob:
    """The service side of an in-memory lease: one blob's lease state, on the service's clock.

    Share one instance between the :class:`InMemoryLease` electors of a test. ``fail`` makes every
    operation raise :class:`TransientError` (storage unreachable).

    Args:
        monotonic: The service's clock, seconds (usually the same fake clock as the electors').
    """

    def __init__(self, monotonic: Monotonic = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._holder: str | None = None
        self._expires_at = -math.inf
        self.fail = False

    def __repr__(self) -> str:
        return f"InMemoryLeaseBlob(holder={self.holder!r})"

    @property
    def holder(self) -> str | None:
        """The lease id of the active lease, or None when the blob is not leased."""
        with self._lock:
            return self._active()

    def _active(self) -> str | None:
        return self._holder if self._monotonic() < self._expires_at else None

    def _check(self) -> None:
        if self.fail:
            raise TransientError("in-memory lease blob unreachable")

    def acquire(self, lease_id: str, duration_s: int) -> bool:
        """Acquire for ``lease_id`` unless another id holds an active lease (Lease Blob: Acquire)."""
        with self._lock:
            self._check()
            active = self._active()
            if active is not None and active != lease_id:
                return False
            self._holder, self._expires_at = lease_id, self._monotonic() + duration_s
            return True

    def renew(self, lease_id: str, duration_s: int) -> bool:
        """Renew ``lease_id``'s lease, even expired, unless it was released or leased again."""
        with self._lock:
            self._check()
            if self._holder != lease_id:
                return False
            self._expires_at = self._monotonic() + duration_s
            return True

    def release(self, lease_id: str) -> None:
        """End ``lease_id``'s lease at once; a lease held by another id is left alone."""
        with self._lock:
            self._check()
            if self._holder == lease_id:
                self._holder, self._expires_at = None, -math.inf


class InMemoryLease(_GuardedLease):
    """The blob lease's semantics in memory, for unit tests: same guard, same schedule, fake clock.

    Args:
        blob: The shared service-side lease state.
        duration_s: Lease period in seconds, 15 to 60.
        renew_every_s: Seconds between renewals (default: a third of the period).
        safety_margin_s: Seconds before the local expiry at which leadership ends (default: a fifth).
        monotonic: Local clock, seconds.
        lease_id: This elector's lease id (default: a new UUID).

    Raises:
        ValueError: see :class:`_GuardedLease`.
    """

    def __init__(
        self,
        blob: InMemoryLeaseBlob,
        *,
        duration_s: int = MIN_LEASE_S,
        renew_every_s: float | None = None,
        safety_margin_s: float | None = None,
        monotonic: Monotonic = time.monotonic,
        lease_id: str | None = None,
    ) -> None:
        super().__init__(
            duration_s=duration_s,
            renew_every_s=renew_every_s,
            safety_margin_s=safety_margin_s,
            monotonic=monotonic,
            lease_id=lease_id,
        )
        self._blob = blob

    def __repr__(self) -> str:
        return f"InMemoryLease(lease_id={self.lease_id!r}, duration_s={self.duration_s})"

    def _remote_acquire(self) -> bool:
        return self._blob.acquire(self.lease_id, self.duration_s)

    def _remote_renew(self) -> bool:
        return self._blob.renew(self.lease_id, self.duration_s)

    def _remote_release(self) -> None:
        self._blob.release(self.lease_id)
