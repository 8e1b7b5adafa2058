"""A loopback stand-in for the Durable Functions extension's HTTP API, as a durable client binding reaches it.

A ``durableClient`` binding hands the worker a JSON document (:meth:`DurableExtension.client_binding`), and
azure-functions-durable 1.7.0's ``DurableOrchestrationClient`` builds every request from its ``rpcBaseUrl``
(the extension's local RPC endpoint, ``http://127.0.0.1:17071/durabletask/`` on a real host).
:class:`DurableExtension` serves the three endpoints orderflow's triggers call, answering as the
extension's ``HttpApiHandler`` does (the Durable Functions "HTTP API reference" documents the same routes
and status codes):

- ``GET {rpc}instances/{id}``: 404 with no body for an unknown instance; otherwise the status payload
  (``name``, ``instanceId``, ``runtimeStatus``, ``input``, ``customStatus``, ``output``, ``createdTime``,
  ``lastUpdatedTime``), 202 while Running, Pending, ContinuedAsNew or Suspended, 200 once finished.
- ``POST {rpc}orchestrators/{name}/{id}``: the body is the input; 202 with the management payload; 400
  with the extension's error document for a name that is no orchestrator of the app.
- ``POST {rpc}instances/{id}/raiseEvent/{event}``: 404 unknown, 410 finished, 400 unless the content is
  ``application/json``; otherwise 202 with no body, and the event kept as the extension keeps it.
- ``DELETE {rpc}instances/?createdTimeFrom=...&createdTimeTo=...&runtimeStatus=...``: the purge of
  instance history by filter (``HandleDeleteHistoryWithFiltersRequestAsync``): deletes every instance
  created in ``[createdTimeFrom, createdTimeTo)`` whose status is one of ``runtimeStatus`` (a comma-separated
  list); 200 with ``{"instancesDeleted": n}``, or 404 with no body when none matched. ``createdTimeFrom``
  is required (400 without it).

The extension parses a start or raise body once (``JsonConvert.DeserializeObject`` /
``MessagePayloadDataConverter.ConvertToJToken``) and stores what it got; :attr:`Instance.input` and
:attr:`Instance.events` hold exactly that. Every request is recorded, and :meth:`DurableExtension.fail_next`
makes the next request of one kind fail as the extension fails (its error document, or a bare status).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

RPC_PATH = "/durabletask/"
"""Path of the extension's local RPC endpoint, where ``rpcBaseUrl`` points."""

WEBHOOK_PATH = "/runtime/webhooks/durabletask"
"""Path of the extension's public webhooks (the binding's ``creationUrls`` and ``managementUrls``)."""

RUNNING = frozenset({"Running", "Pending", "ContinuedAsNew", "Suspended"})
"""Runtime statuses the extension answers with 202 (in progress); any other is finished (200)."""

RequestKind = Literal["status", "start", "raise", "purge"]


@dataclass(frozen=True)
class HttpRequest:
    """One request the extension received: method, decoded path, query, content type and raw body."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: bytes

    def json(self) -> Any:
        """The body parsed once, as the extension parses it."""
        return json.loads(self.body)


@dataclass
class Instance:
    """An orchestration instance the extension knows.

    Attributes:
        name: The orchestrator function.
        runtime_status: ``Pending``, ``Running``, ``Completed``, ``Failed``, ``Terminated``, ...
        custom_status: What the orchestrator last set (orderflow's ``waiting:<step>``).
        input: The start body as the extension parsed it.
        events: Each raised event: its name and its payload as the extension parsed the body.
    """

    name: str
    runtime_status: str = "Pending"
    custom_status: Any = None
    input: Any = None
    output: Any = None
    created_time: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    events: list[tuple[str, Any]] = field(default_factory=list)

    def payload(self, instance_id: str) -> dict[str, Any]:
        """The status document the extension answers (``StatusResponsePayload``)."""
        return {
            "name": self.name,
            "instanceId": instance_id,
            "runtimeStatus": self.runtime_status,
            "input": self.input,
            "customStatus": self.custom_status,
            "output": self.output,
            "createdTime": self.created_time,
            "lastUpdatedTime": self.created_time,
            "historyEvents": None,
        }


def error_document(message: str, exception: str) -> dict[str, Any]:
    """The body of the extension's ``CreateErrorResponse``: ASP.NET's ``HttpError`` with the exception."""
    return {
        "Message": message,
        "ExceptionMessage": exception,
        "ExceptionType": "System.InvalidOperationException",
        "StackTrace": "   at Microsoft.Azure.WebJobs.Extensions.DurableTask.HttpApiHandler",
    }


SERVER_ERROR = error_document(
    "Something went wrong while processing your request", "The task hub's storage is unavailable."
)
"""What the extension answers with a 500 when a handler throws (its storage is unreachable, say)."""


@dataclass(frozen=True)
class Fault:
    """A scripted answer for the next request of one kind: a status and a body (None: no body)."""

    status: int
    body: dict[str, Any] | None = None


class DurableExtension:
    """The extension's HTTP API on a free loopback port.

    Args:
        orchestrators: Names the extension knows as orchestrator functions (a start of any other is a 400).
        task_hub: The task hub named in the client binding.
    """

    def __init__(self, orchestrators: Collection[str], *, task_hub: str = "orderflow") -> None:
        self.orchestrators = frozenset(orchestrators)
        self.task_hub = task_hub
        self.instances: dict[str, Instance] = {}
        self.requests: list[HttpRequest] = []
        self._faults: dict[RequestKind, Fault] = {}
        self._lock = threading.Lock()
        extension = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the http.server naming
                extension._serve(self)

            def do_POST(self) -> None:
                extension._serve(self)

            def do_DELETE(self) -> None:
                extension._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def rpc_base_url(self) -> str:
        """The binding's ``rpcBaseUrl``."""
        return self.origin + RPC_PATH

    def reset(self) -> None:
        """Forget every instance, request and scripted fault."""
        with self._lock:
            self.instances.clear()
            self.requests.clear()
            self._faults.clear()

    def take(self) -> list[HttpRequest]:
        """The requests received so far, and forget them."""
        with self._lock:
            requests, self.requests = self.requests, []
        return requests

    def fail_next(self, kind: RequestKind, fault: Fault) -> None:
        """Answer the next ``kind`` request (``status``, ``start``, ``raise``) with ``fault`` instead."""
        with self._lock:
            self._faults[kind] = fault

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        request = HttpRequest(
            method=handler.command,
            path=unquote(url.path),
            query=dict(parse_qsl(url.query)),
            content_type=handler.headers.get_content_type() if handler.headers.get("Content-Type") else None,
            body=handler.rfile.read(length),
        )
        with self._lock:
            self.requests.append(request)
            status, body = self._answer(request)
        data = b"" if body is None else json.dumps(body).encode()
        handler.send_response(status)
        if body is not None:
            handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _answer(self, request: HttpRequest) -> tuple[int, dict[str, Any] | None]:
        route = _route(request.path)
        if route is None:
            return 404, None
        kind, parts = route
        method = {"status": "GET", "purge": "DELETE"}.get(kind, "POST")
        if request.method != method:
            return 404, None
        fault = self._faults.pop(kind, None)
        if fault is not None:
            return fault.status, fault.body
        if kind == "status":
            return self._status(parts[0])
        if kind == "purge":
            return self._purge(request.query)
        if kind == "start":
            return self._start(parts[0], parts[1], request)
        return self._raise(parts[0], parts[1], request)

    def _status(self, instance_id: str) -> tuple[int, dict[str, Any] | None]:
        instance = self.instances.get(instance_id)
        if instance is None:
            return 404, None
        return (202 if instance.runtime_status in RUNNING else 200), instance.payload(instance_id)

    def _start(self, name: str, instance_id: str, request: HttpRequest) -> tuple[int, dict[str, Any] | None]:
        if name not in self.orchestrators:
            return 400, error_document(
                "One or more of the arguments submitted is incorrect",
                f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function.",
            )
        # Durable Functions 1.x replaces an instance that already exists (docs/design.md §7).
        self.instances[instance_id] = Instance(name=name, input=request.json() if request.body else None)
        return 202, self.management_payload(instance_id)

    def _purge(self, query: dict[str, str]) -> tuple[int, dict[str, Any] | None]:
        if "createdTimeFrom" not in query:
            return 400, error_document("createdTimeFrom is required", "")
        start = _parse_time(query["createdTimeFrom"])
        end = _parse_time(query["createdTimeTo"]) if "createdTimeTo" in query else None
        statuses = set(query["runtimeStatus"].split(",")) if query.get("runtimeStatus") else None
        gone = [
            instance_id
            for instance_id, instance in self.instances.items()
            if start <= _parse_time(instance.created_time)
            and (end is None or _parse_time(instance.created_time) < end)
            and (statuses is None or instance.runtime_status in statuses)
        ]
        for instance_id in gone:
            del self.instances[instance_id]
        return (200, {"instancesDeleted": len(gone)}) if gone else (404, None)

    def _raise(self, instance_id: str, event: str, request: HttpRequest) -> tuple[int, dict[str, Any] | None]:
        instance = self.instances.get(instance_id)
        if instance is None:
            return 404, None
        if instance.runtime_status not in RUNNING:
            return 410, None
        if request.content_type != "application/json":
            return 400, error_document("Only application/json request content is supported", "")
        instance.events.append((event, request.json()))
        return 202, None

    def management_payload(self, instance_id: str) -> dict[str, str]:
        """The ``CreateCheckStatusResponse`` body the extension answers a start with."""
        prefix = f"{self.origin}{WEBHOOK_PATH}/instances/{instance_id}"
        query = f"taskHub={self.task_hub}&connection=Storage&code=system-key"
        return {
            "id": instance_id,
            "statusQueryGetUri": f"{prefix}?{query}",
            "sendEventPostUri": f"{prefix}/raiseEvent/{{eventName}}?{query}",
            "terminatePostUri": f"{prefix}/terminate?reason={{text}}&{query}",
            "purgeHistoryDeleteUri": f"{prefix}?{query}",
            "restartPostUri": f"{prefix}/restart?{query}",
            "suspendPostUri": f"{prefix}/suspend?reason={{text}}&{query}",
            "resumePostUri": f"{prefix}/resume?reason={{text}}&{query}",
        }

    def client_binding(self) -> str:
        """The ``durableClient`` binding's data, as the extension serialises it for the worker."""
        webhooks = self.origin + WEBHOOK_PATH
        create = f"{webhooks}/orchestrators/{{functionName}}[/{{instanceId}}]"
        management = self.management_payload("INSTANCEID")
        management["rewindPostUri"] = management["terminatePostUri"].replace("/terminate", "/rewind")
        return json.dumps(
            {
                "taskHubName": self.task_hub,
                "creationUrls": {
                    "createNewInstancePostUri": f"{create}?code=system-key",
                    "createAndWaitOnNewInstancePostUri": (
                        f"{create}?timeout={{timeoutInSeconds}}&pollingInterval={{intervalInSeconds}}"
                        "&code=system-key"
                    ),
                },
                "managementUrls": management,
                "baseUrl": webhooks,
                "requiredQueryStringParameters": "code=system-key",
                "rpcBaseUrl": self.rpc_base_url,
            }
        )


def _parse_time(text: str) -> datetime:
    """A time as the SDK writes it (``%Y-%m-%dT%H:%M:%S.%fZ``) or the extension does (no fraction)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _route(path: str) -> tuple[RequestKind, list[str]] | None:
    """The endpoint a decoded path names, and its route values; None for any other path."""
    for base in (RPC_PATH, WEBHOOK_PATH + "/"):
        if path.startswith(base):
            parts = path[len(base) :].strip("/").split("/")
            break
    else:
        return None
    if len(parts) == 3 and parts[0] == "orchestrators":
        return "start", parts[1:]
    if parts == ["instances"]:
        return "purge", []
    if len(parts) == 2 and parts[0] == "instances":
        return "status", parts[1:]
    if len(parts) == 4 and parts[0] == "instances" and parts[2] == "raiseEvent":
        return "raise", [parts[1], parts[3]]
    return None
