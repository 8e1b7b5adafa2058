"""Credentials the local host issues to registered clients: one queue-scoped service SAS per queue.

On Azure a client's identity holds Service Bus Data Sender on its inbound queue and Data Receiver on its
reply queue, nothing at namespace scope (docs/clients.md). Locally the devhost, which holds Azurite's
account key, issues the equivalent: a SAS that may only *add* messages to the client's inbound queue, and
one that may only *read and process* (receive, delete) its reply queue. Azurite checks both (measured by
``tests/integration/test_client_credentials_azurite.py``): the inbound SAS is refused on any other queue
and for receiving; the reply SAS is refused on any other queue and for sending.

What the local emulation does not enforce: the account key itself, which the devhost and the demo driver
hold, can do anything; and every process on the machine can read it from the development connection
string. The SAS limits what a client that uses it can do, not what a process could do if it took the key.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer
from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import QueueSasPermissions, QueueServiceClient, generate_queue_sas

from devhost.queues.factory import StorageQueueFactory
from orderflow.clients import RegisteredClient
from orderflow.settings import Settings

DEFAULT_LIFETIME = timedelta(hours=12)
"""How long an issued SAS is valid: a working day of a local run."""

INBOUND_PERMISSIONS = QueueSasPermissions(add=True)
"""What a client may do on its inbound queue: send."""

REPLY_PERMISSIONS = QueueSasPermissions(read=True, process=True)
"""What a client may do on its reply queue: peek and receive (read), delete what it received (process)."""


@dataclass(frozen=True)
class ClientCredentials:
    """What a registered client holds locally: a SAS URL for each of its two queues.

    Attributes:
        client_id: The client.
        inbound_queue: Its inbound queue's name.
        inbound_url: ``<queue URL>?<SAS with add permission>``.
        reply_queue: Its reply queue's name.
        reply_url: ``<queue URL>?<SAS with read and process permissions>``.
        expires_at: When both stop working (UTC).
    """

    client_id: str
    inbound_queue: str
    inbound_url: str
    reply_queue: str
    reply_url: str
    expires_at: datetime

    def __repr__(self) -> str:
        # The URLs carry the signatures: never in a log.
        return f"ClientCredentials(client_id={self.client_id!r}, expires_at={self.expires_at.isoformat()})"

    def queues(self) -> StorageQueueFactory:
        """A queue factory of exactly the client's two queues, each with its own SAS."""
        return StorageQueueFactory.from_queue_urls(
            {self.inbound_queue: self.inbound_url, self.reply_queue: self.reply_url}
        )


def issue_client_credentials(
    connection_string: str,
    client: RegisteredClient,
    *,
    lifetime: timedelta = DEFAULT_LIFETIME,
    now: datetime | None = None,
) -> ClientCredentials:
    """Create ``client``'s two queues if missing and sign a SAS for each with the account key.

    Args:
        connection_string: The storage account's connection string, with its account key (Azurite's).
        client: The registered client.
        lifetime: How long the SAS stays valid.
        now: The time of issue (default: the system clock); the SAS starts five minutes earlier (skew).

    Raises:
        ValueError: the connection string carries no account key.
    """
    service = QueueServiceClient.from_connection_string(connection_string)
    try:
        key = getattr(service.credential, "account_key", None)
        if not key:
            raise ValueError("issuing a client SAS needs the account key in the connection string")
        for queue in (client.inbound_queue, client.reply_queue):
            with contextlib.suppress(ResourceExistsError):  # the devhost created it at start-up
                service.create_queue(queue)
        issued = now or datetime.now(UTC)
        expires = issued + lifetime

        def url(queue: str, permission: QueueSasPermissions) -> str:
            sas = generate_queue_sas(
                service.account_name or "",
                queue,
                key,
                permission=permission,
                expiry=expires,
                start=issued - timedelta(minutes=5),
            )
            return f"{service.url.rstrip('/')}/{queue}?{sas}"

        return ClientCredentials(
            client_id=client.client_id,
            inbound_queue=client.inbound_queue,
            inbound_url=url(client.inbound_queue, INBOUND_PERMISSIONS),
            reply_queue=client.reply_queue,
            reply_url=url(client.reply_queue, REPLY_PERMISSIONS),
            expires_at=expires,
        )
    finally:
        service.close()


def connection_strings(credentials: ClientCredentials) -> tuple[str, str]:
    """The SAS-only connection strings of a client's two queues, ``(inbound, reply)``, as the CLI takes
    them in ``STORAGE_CONNECTION_STRING`` (``QueueEndpoint=<account URL>;SharedAccessSignature=<SAS>``)."""

    def connection(url: str) -> str:
        queue_url, _, sas = url.partition("?")
        return f"QueueEndpoint={queue_url.rsplit('/', 1)[0]};SharedAccessSignature={sas}"

    return connection(credentials.inbound_url), connection(credentials.reply_url)


app = typer.Typer(add_completion=False)


@app.command()
def main(
    client_id: Annotated[str, typer.Argument(help="The registered client (an id in CLIENTS).")],
    hours: Annotated[float, typer.Option(min=0.1, max=24 * 7, help="Hours the SAS stay valid.")] = 12.0,
) -> None:
    """Print the two SAS-only connection strings of one registered client, signed with the account key
    of STORAGE_CONNECTION_STRING: send orders and cancels with the first (`orderflow submit`, `cancel`),
    read replies with the second (`orderflow watch`). Neither opens any other queue."""
    settings = Settings.load()
    try:
        client = settings.clients.client(client_id)
    except KeyError:
        raise typer.BadParameter(f"no client {client_id!r} in CLIENTS") from None
    issued = issue_client_credentials(
        settings.connections.STORAGE_CONNECTION_STRING, client, lifetime=timedelta(hours=hours)
    )
    inbound, reply = connection_strings(issued)
    typer.echo(f"# client {client_id}, valid until {issued.expires_at.isoformat()}")
    typer.echo(f"# send to {client.inbound_queue}:")
    typer.echo(f"INBOUND_CONNECTION_STRING='{inbound}'")
    typer.echo(f"# receive from {client.reply_queue}:")
    typer.echo(f"REPLY_CONNECTION_STRING='{reply}'")


if __name__ == "__main__":
    app()
