"""A loopback Settlement server: the Functions host's side of Service Bus message actions.

The host serves message settlement to out-of-process workers over gRPC (the ``Settlement`` service);
the Python extension's ``ServiceBusMessageActions`` connects to the address on the worker's command
line. This server is built from the extension's own protocol definitions
(``azurefunctions.extensions.bindings.protos.settlement_pb2_grpc``) and records every call it gets.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from azurefunctions.extensions.bindings.protos import settlement_pb2_grpc
from google.protobuf import empty_pb2


@dataclass(frozen=True)
class SettlementCall:
    """One settlement the host received: the verb, the lock token, and a dead letter's two fields."""

    verb: str
    lock_token: str
    reason: str | None = None
    description: str | None = None


class RecordingSettlement(settlement_pb2_grpc.SettlementServicer):  # type: ignore[misc]
    """The Settlement service; ``calls`` lists what it received, in order."""

    def __init__(self) -> None:
        self.calls: list[SettlementCall] = []
        self._lock = threading.Lock()

    def _record(self, call: SettlementCall) -> Any:
        with self._lock:
            self.calls.append(call)
        return empty_pb2.Empty()

    def Complete(self, request: Any, context: Any) -> Any:
        return self._record(SettlementCall("complete", request.locktoken))

    def Abandon(self, request: Any, context: Any) -> Any:
        return self._record(SettlementCall("abandon", request.locktoken))

    def Deadletter(self, request: Any, context: Any) -> Any:
        reason = request.deadletterReason.value if request.HasField("deadletterReason") else None
        description = (
            request.deadletterErrorDescription.value
            if request.HasField("deadletterErrorDescription")
            else None
        )
        return self._record(SettlementCall("deadletter", request.locktoken, reason, description))

    def take(self) -> list[SettlementCall]:
        """The calls received so far, and forget them."""
        with self._lock:
            calls, self.calls = self.calls, []
        return calls


class SettlementServer:
    """The recording Settlement service on a free loopback port."""

    def __init__(self) -> None:
        self.service = RecordingSettlement()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        settlement_pb2_grpc.add_SettlementServicer_to_server(self.service, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def stop(self) -> None:
        """Stop serving (in-flight calls get a second to finish)."""
        self._server.stop(grace=1).wait()
