"""The bytes the Functions host sends a Python worker for a ``ServiceBusReceivedMessage`` parameter.

The host's Service Bus extension turns the received message into ``ParameterBindingData``
(``ServiceBusExtensionConfigProvider.ConvertReceivedMessageToBindingData``): version ``1.0``, source
``AzureServiceBusReceivedMessage``, content type ``application/octet-stream``, and as content the
16-byte lock token (.NET ``Guid.ToByteArray()``, little-endian) followed by the AMQP message as the
.NET client received it: header (with the delivery count), delivery annotations (the lock token),
message annotations (enqueued time, sequence number, locked-until), properties, application
properties and one data section. The sections are encoded here with the Azure SDK's own AMQP encoder
(``azure.servicebus._pyamqp``); the extension's converter decodes them on the other side.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from azure.servicebus._pyamqp import _encode as amqp
from azure.servicebus._pyamqp.message import Header, Message, Properties
from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes

BINDING_SOURCE = "AzureServiceBusReceivedMessage"
BINDING_CONTENT_TYPE = "application/octet-stream"
_DELIVERY_ANNOTATIONS = 0x71


@dataclass(frozen=True)
class HostMessage:
    """One message as the broker delivered it to the host."""

    body: bytes
    message_id: str = "m-1"
    delivery_count: int = 1
    lock_token: uuid.UUID = field(default_factory=uuid.uuid4)
    correlation_id: str | None = None
    reply_to: str | None = None
    application_properties: Mapping[Any, Any] | None = None
    sequence_number: int = 7
    enqueued_at: datetime = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def content(self) -> bytes:
        """The ``ModelBindingData.content`` bytes for this message."""
        out = bytearray()
        amqp.encode_payload(out, Message(header=Header(delivery_count=self.delivery_count)))
        amqp.encode_value(
            out,
            {
                TYPE: AMQPTypes.described,
                VALUE: (
                    {TYPE: AMQPTypes.ulong, VALUE: _DELIVERY_ANNOTATIONS},
                    amqp.encode_annotations(
                        {b"x-opt-lock-token": {TYPE: AMQPTypes.uuid, VALUE: self.lock_token}}
                    ),
                ),
            },
        )
        millis = int(self.enqueued_at.timestamp() * 1000)
        amqp.encode_payload(
            out,
            Message(
                message_annotations={
                    b"x-opt-enqueued-time": {TYPE: AMQPTypes.timestamp, VALUE: millis},
                    b"x-opt-sequence-number": {TYPE: AMQPTypes.long, VALUE: self.sequence_number},
                    b"x-opt-locked-until": {TYPE: AMQPTypes.timestamp, VALUE: millis + 60_000},
                },
                properties=Properties(
                    message_id=self.message_id,
                    correlation_id=self.correlation_id,
                    reply_to=self.reply_to,
                    content_type="application/json",
                ),
                application_properties=dict(self.application_properties or {}) or None,
                data=[self.body],
            ),
        )
        return self.lock_token.bytes_le + bytes(out)
