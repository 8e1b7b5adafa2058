"""Counts of the gRPC calls a process makes to the durabletask backend, by method.

:func:`install_grpc_counter` makes every channel ``grpc.insecure_channel`` opens from then on (the
durabletask client's and worker's channels) an intercepted one whose calls are counted under the
method's short name (``StartInstance``, ``RaiseEvent``, ``CompleteOrchestratorTask``,
``CompleteActivityTask``, ``GetWorkItems`` ...), whatever process the backend runs in. A streaming call
counts once, when it is opened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from bench.counting import OperationCounts

GRPC = "durabletask"
"""The label of every gRPC call counted (the backend the calls go to)."""


def method_name(full_method: str) -> str:
    """``/package.Service/Method`` -> ``Method`` (anything without a slash is returned as given)."""
    return full_method.rsplit("/", 1)[-1] or full_method


class CountingInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """A client interceptor that counts each call as ``(method, GRPC)`` in ``counts``."""

    def __init__(self, counts: OperationCounts) -> None:
        self.counts = counts

    def _count(self, details: Any) -> None:
        self.counts.add(method_name(str(getattr(details, "method", ""))), GRPC)

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Count, then continue."""
        self._count(client_call_details)
        return continuation(client_call_details, request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Count, then continue."""
        self._count(client_call_details)
        return continuation(client_call_details, request)

    def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        """Count, then continue."""
        self._count(client_call_details)
        return continuation(client_call_details, request_iterator)

    def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        """Count, then continue."""
        self._count(client_call_details)
        return continuation(client_call_details, request_iterator)


_install_lock = threading.Lock()


def install_grpc_counter(counts: OperationCounts) -> Callable[[], None]:
    """Count the calls on every insecure channel opened from now on; returns the function that undoes it.

    Channels opened before the call are not counted: install before the durabletask client and worker
    are created.
    """
    interceptor = CountingInterceptor(counts)
    with _install_lock:
        original = grpc.insecure_channel

        def insecure_channel(target: str, *args: Any, **kwargs: Any) -> grpc.Channel:
            return grpc.intercept_channel(original(target, *args, **kwargs), interceptor)

        grpc.insecure_channel = insecure_channel

    def uninstall() -> None:
        with _install_lock:
            grpc.insecure_channel = original

    return uninstall
