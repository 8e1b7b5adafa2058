"""The supervisor lease over an Azure Storage blob lease (Azurite locally): :class:`LeaderLease`, and
:func:`current_holder` for a reader who wants to know which process leads. The lease semantics relied on
are in :mod:`devhost.lease.election`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

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

from devhost.lease.election import MIN_LEASE_S, GuardedLease, Monotonic
from orderflow.errors import OrderflowError, PermanentError, TransientError

logger = logging.getLogger(__name__)


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


class LeaderLease(GuardedLease):
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
        ValueError: see :class:`GuardedLease`.
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
