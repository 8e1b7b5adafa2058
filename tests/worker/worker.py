"""The Python language worker library driven as the host-facing proxy worker drives it.

On Python 3.13+ the Functions host starts a proxy worker that speaks gRPC to the host and hands each
request to the worker library ``azure_functions_runtime``: ``worker_init_request`` (which indexes
``function_app.py``), ``functions_metadata_request``, ``function_load_request`` per function, then
``invocation_request`` per trigger. :class:`FunctionsWorker` makes those same calls with the same
request objects (a ``StreamingMessage`` plus the ``host`` and ``protos`` properties), so what the
worker accepts, refuses, decodes and returns is the worker's own doing. What the real host does
around it (triggers, the Durable extension, Service Bus) is played by the tests' loopback servers;
docs/worker-harness.md lists what is real, what is orderflow's, and what no test here runs.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azure_functions_runtime import handle_event
from azure_functions_runtime.utils import threadpool

from tests.worker.rpc import protos

HOST_VERSION = "4.1044.400"
"""The Functions host version the harness claims (any 4.x host with worker indexing)."""

SUCCESS = protos.StatusResult.Success


HOST_TRACE_PARENT = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
"""The trace context an invocation carries unless a test gives another."""


@dataclass(frozen=True)
class Request:
    """What the proxy worker hands each ``handle_event`` handler."""

    request: Any
    properties: Mapping[str, Any]


class WorkerError(AssertionError):
    """The worker answered a request with a failure status."""


class FunctionsWorker:
    """One worker process: init and index once, load every function, then invoke them.

    Args:
        app_dir: The function app directory (holds ``function_app.py``).
        settlement_port: Port of the Service Bus settlement server the extension's message actions
            connect to; the host passes it on the worker's command line (``--host``, ``--port``).
    """

    def __init__(self, app_dir: Path, *, settlement_port: int) -> None:
        self.app_dir = app_dir
        self._loop = asyncio.new_event_loop()
        self._properties = {"host": "127.0.0.1", "protos": protos}
        # The extension reads the host's gRPC address from the worker process's arguments.
        sys.argv = [
            sys.argv[0],
            "--host",
            "127.0.0.1",
            "--port",
            str(settlement_port),
            "--functions-grpc-max-message-length",
            str(2**31 - 1),
        ]
        self.init_response: Any = None
        self.metadata: dict[str, Any] = {}
        self.load_responses: dict[str, Any] = {}

    def _call(self, handler: Callable[[Request], Awaitable[Any]], **content: Any) -> Any:
        message = protos.StreamingMessage(request_id=str(uuid.uuid4()), **content)
        return self._loop.run_until_complete(handler(Request(message, self._properties)))

    def start(self) -> None:
        """Init (the worker indexes the app), read the metadata, load every function (each answer in
        :attr:`load_responses`).

        Raises:
            WorkerError: init or the metadata request answered with a failure; the message is the
                worker's.
        """
        os.chdir(self.app_dir)
        if str(self.app_dir) not in sys.path:
            sys.path.insert(0, str(self.app_dir))
        threadpool.start_threadpool_executor()
        self.init_response = self._call(
            handle_event.worker_init_request,
            worker_init_request=protos.WorkerInitRequest(
                host_version=HOST_VERSION,
                function_app_directory=str(self.app_dir),
                capabilities={"RpcHttpBodyOnly": "true", "TypedDataCollection": "true"},
            ),
        )
        _check(self.init_response.result, "worker init")
        response = self._call(
            handle_event.functions_metadata_request,
            functions_metadata_request=protos.FunctionsMetadataRequest(
                function_app_directory=str(self.app_dir)
            ),
        )
        _check(response.result, "function metadata")
        self.metadata = {function.name: function for function in response.function_metadata_results}
        for name, function in self.metadata.items():
            loaded = self._call(
                handle_event.function_load_request,
                function_load_request=protos.FunctionLoadRequest(
                    function_id=function.function_id, metadata=function
                ),
            )
            # Recorded, not raised: a test asserts every load, so one refused load names itself.
            self.load_responses[name] = loaded

    def stop(self) -> None:
        """Stop the worker's thread pool and close its event loop."""
        threadpool.stop_threadpool_executor()
        self._loop.close()

    def invoke(
        self,
        name: str,
        inputs: Mapping[str, Any],
        *,
        trigger_metadata: Mapping[str, Any] | None = None,
        trace_parent: str = HOST_TRACE_PARENT,
    ) -> Any:
        """Send one ``InvocationRequest`` for function ``name`` and return the ``InvocationResponse``.

        Args:
            name: The function's name as indexed.
            inputs: Binding name -> ``TypedData`` (the trigger and every input binding).
            trigger_metadata: Name -> ``TypedData``, as the host sends for the trigger.
            trace_parent: The invocation's ``RpcTraceContext.trace_parent``: the host's activity for it
                (``azure.functions.Context.trace_context`` in the function).
        """
        function = self.metadata[name]
        request = protos.InvocationRequest(
            invocation_id=str(uuid.uuid4()),
            function_id=function.function_id,
            input_data=[protos.ParameterBinding(name=key, data=value) for key, value in inputs.items()],
            trigger_metadata=dict(trigger_metadata or {}),
            trace_context=protos.RpcTraceContext(trace_parent=trace_parent),
            retry_context=protos.RetryContext(),
        )
        return self._call(handle_event.invocation_request, invocation_request=request)


def _check(result: Any, what: str) -> None:
    if result.status != SUCCESS:
        raise WorkerError(f"{what} failed: {result.exception.message}")


def failure(response: Any) -> str | None:
    """The worker's failure message of an invocation, or None when it succeeded."""
    return None if response.result.status == SUCCESS else str(response.result.exception.message)
