"""The lean transport of loopback emulators (keep-alive per thread, HTTP/1.1 written and parsed
in the transport); the SDK's own elsewhere."""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError, ServiceResponseError, ServiceResponseTimeoutError
from azure.core.pipeline.transport import HttpRequest

from devhost.http_transport import (
    RECENTLY_USED_S,
    LoopbackTransport,
    _Kept,
    is_loopback,
    transport_for,
)
from devhost.http_wire import Wire, request_bytes
from devhost.queues.factory import StorageQueueFactory

pytestmark = pytest.mark.unit

AZURITE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
    "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;"
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, str, bytes, str, int]] = []  # method, path, body, content-length, port
        self.close_after: set[str] = set()
        self.drop_once: set[str] = set()  # closed without an answer, the first time each is asked for
        self.hang: set[str] = set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: _Server

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.server.seen.append(
            (self.command, self.path, body, str(self.headers.get("Content-Length")), self.client_address[1])
        )
        if self.path in self.server.hang:
            threading.Event().wait(2)
            return
        if self.path in self.server.drop_once:
            self.server.drop_once.discard(self.path)
            self.close_connection = True  # as a keep-alive timer firing while the request was on its way
            return
        reply = b"missing" if self.path == "/missing" else b"ok:" + body
        self.send_response(404 if self.path == "/missing" else 201)
        self.send_header("X-Ms-Request-Id", "r1")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
        if self.path in self.server.close_after:
            self.close_connection = True  # as Node's keep-alive timer drops an idle connection

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _url(server: _Server, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_only_this_machine_is_loopback() -> None:
    assert is_loopback("http://127.0.0.1:10001/devstoreaccount1")
    assert is_loopback("https://localhost:8081/")
    assert is_loopback("http://[::1]:10001/")
    assert not is_loopback("https://orderflow.documents.azure.com:443/")
    assert not is_loopback("")


def test_a_loopback_endpoint_gets_the_lean_transport_and_azure_the_sdk_default() -> None:
    transport = transport_for("https://127.0.0.1:8081/", connection_timeout_s=2, read_timeout_s=3)
    assert isinstance(transport, LoopbackTransport)
    assert (transport.connection_timeout_s, transport.read_timeout_s) == (2, 3)
    assert transport_for("https://orderflow.queue.core.windows.net") is None


def test_the_azurite_queue_clients_use_the_lean_transport() -> None:
    factory = StorageQueueFactory.from_connection_string(AZURITE, creatable=lambda name: False)
    service = factory._service
    assert service is not None
    assert isinstance(service._pipeline._transport, LoopbackTransport)
    factory.close()


def test_requests_on_one_thread_share_one_connection_and_answers_are_read_whole(server: _Server) -> None:
    transport = LoopbackTransport(read_timeout_s=5)
    first = transport.send(HttpRequest("POST", _url(server, "/q/messages?x=1"), data="é-body"))
    second = transport.send(HttpRequest("GET", _url(server, "/missing")))
    assert (first.status_code, first.headers["x-ms-request-id"]) == (201, "r1")
    assert first.body() == "ok:é-body".encode()
    assert (second.status_code, second.text()) == (404, "missing")
    assert [(m, p, b, n) for m, p, b, n, _ in server.seen] == [
        ("POST", "/q/messages?x=1", "é-body".encode(), "7"),  # UTF-8 bytes, their length
        ("GET", "/missing", b"", "None"),
    ]
    assert server.seen[0][4] == server.seen[1][4]  # one connection (the same client port)
    transport.close()


def test_a_connection_the_server_closed_while_idle_is_reopened(server: _Server) -> None:
    server.close_after.add("/closing")
    transport = LoopbackTransport(read_timeout_s=5)
    transport.send(HttpRequest("DELETE", _url(server, "/closing")))
    answer = transport.send(HttpRequest("PUT", _url(server, "/after"), data=b"x"))
    assert (answer.status_code, answer.body()) == (201, b"ok:x")
    assert server.seen[0][4] != server.seen[1][4]
    transport.close()


def test_a_request_on_a_kept_connection_the_server_closed_is_sent_once_more_on_a_new_one(
    server: _Server,
) -> None:
    transport = LoopbackTransport(read_timeout_s=5)
    transport.send(HttpRequest("GET", _url(server, "/first")))
    server.drop_once.add("/q/messages")
    answer = transport.send(HttpRequest("POST", _url(server, "/q/messages"), data=b"m"))
    assert (answer.status_code, answer.body()) == (201, b"ok:m")
    ports = [port for *_, port in server.seen]
    assert [path for _, path, *_ in server.seen] == ["/first", "/q/messages", "/q/messages"]
    assert ports[0] == ports[1] != ports[2]  # dropped on the kept connection, answered on a new one
    transport.close()


def test_a_new_connection_closed_without_an_answer_is_a_response_error(server: _Server) -> None:
    transport = LoopbackTransport(read_timeout_s=5)
    server.drop_once.add("/q/messages")
    with pytest.raises(ServiceResponseError):
        transport.send(HttpRequest("POST", _url(server, "/q/messages"), data=b"m"))
    assert len(server.seen) == 1  # not sent again: the SDK's retry policy decides
    transport.close()


def test_each_thread_keeps_its_own_connection(server: _Server) -> None:
    transport = LoopbackTransport(read_timeout_s=5)
    transport.send(HttpRequest("GET", _url(server, "/a")))
    other = threading.Thread(target=lambda: transport.send(HttpRequest("GET", _url(server, "/b"))))
    other.start()
    other.join()
    assert len({port for *_, port in server.seen}) == 2
    transport.close()
    assert repr(transport) == "LoopbackTransport(connections=0)"


def test_failures_raise_what_the_sdks_retry_and_translate(server: _Server) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{unused.getsockname()[1]}/q"
    transport = LoopbackTransport(connection_timeout_s=1, read_timeout_s=0.2)
    with pytest.raises(ServiceRequestError):
        transport.send(HttpRequest("GET", refused))
    server.hang.add("/hang")
    with pytest.raises(ServiceResponseTimeoutError):
        transport.send(HttpRequest("GET", _url(server, "/hang")))
    # The broken connection was dropped: the next request gets a new one.
    assert transport.send(HttpRequest("GET", _url(server, "/ok")), read_timeout=5).status_code == 201
    with pytest.raises(ValueError, match="body"):
        transport.send(HttpRequest("POST", _url(server, "/q"), data={"form": "field"}))
    transport.close()


def test_a_kept_connection_is_polled_only_when_it_sat_idle_long_enough_to_be_closed() -> None:
    now = [0.0]
    near, far = socket.socketpair()
    connection = http.client.HTTPConnection("127.0.0.1")
    connection.sock = near
    kept = _Kept(connection, clock=lambda: now[0])
    far.close()  # the server closes it: the socket turns readable (end of file)

    now[0] = RECENTLY_USED_S / 2
    assert kept.reusable()  # handed out a moment ago: used without a poll (a resend covers a close)
    now[0] += RECENTLY_USED_S + 0.1
    assert not kept.reusable()  # idle past the window: the poll sees the close
    near.close()

    open_near, open_far = socket.socketpair()
    alive = http.client.HTTPConnection("127.0.0.1")
    alive.sock = open_near
    idle = _Kept(alive, clock=lambda: now[0])
    now[0] += 10 * RECENTLY_USED_S
    assert idle.reusable()  # polled, and nothing to read: still open
    alive.sock = None
    assert not idle.reusable()  # closed by http.client itself (a "Connection: close" answer)
    open_near.close()
    open_far.close()


class _Canned:
    """A raw TCP server answering every request on a connection with the next of ``answers`` (bytes as
    they are), recording each request's bytes."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            conn, _ = self._listener.accept()
            self.connections += 1
            with conn:
                while self.answers:
                    try:
                        request = conn.recv(65536)
                    except ConnectionResetError:  # closed with an answer unread
                        break
                    if not request:
                        break
                    self.requests.append(request)
                    answer = self.answers.pop(0)
                    conn.sendall(answer)
                    if b"Connection: close" in answer:
                        break

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def test_answers_are_parsed_without_http_clients_header_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("http.client parsed an answer")

    monkeypatch.setattr(http.client, "parse_headers", refuse)
    canned = _Canned(
        [
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b'X-Folded: a\r\n b\r\n\r\n4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nTrailer: t\r\n\r\n',
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nX-Ms-Request-Id: r2\r\n\r\n",
            b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            b"HTTP/1.0 200 OK\r\n\r\nto the end",
        ]
    )
    transport = LoopbackTransport(read_timeout_s=5)
    chunked = transport.send(HttpRequest("GET", canned.url("/a?x=1")))
    assert (chunked.status_code, chunked.reason, chunked.body()) == (200, "OK", b'{"a":1}')
    assert (chunked.headers["x-folded"], chunked.content_type) == ("a b", "application/json")
    empty = transport.send(HttpRequest("DELETE", canned.url("/b")))
    assert (empty.status_code, empty.body(), empty.headers["x-ms-request-id"]) == (204, b"", "r2")
    closing = transport.send(HttpRequest("PUT", canned.url("/c"), data=b"xy"))
    assert (closing.status_code, closing.body()) == (201, b"ok")
    assert repr(transport) == "LoopbackTransport(connections=0)"  # closed with its answer
    to_end = transport.send(HttpRequest("GET", canned.url("/d")))
    assert (to_end.status_code, to_end.body()) == (200, b"to the end")
    assert canned.connections == 2  # the first three on one kept connection, the last on a new one
    assert canned.requests[0] == (
        f"GET /a?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{canned.port}\r\nAccept-Encoding: identity\r\n\r\n".encode()
    )
    assert canned.requests[2].endswith(b"Content-Length: 2\r\n\r\nxy")
    transport.close()


def test_request_bytes_are_what_http_client_writes() -> None:
    key = ("https", "localhost", 443)
    assert request_bytes("POST", "/q", key, {"x-ms-date": "d", "Content-Length": "3"}, b"abc") == (
        b"POST /q HTTP/1.1\r\nx-ms-date: d\r\nContent-Length: 3\r\nHost: localhost\r\n"
        b"Accept-Encoding: identity\r\n\r\nabc"
    )
    assert request_bytes("PUT", "/", ("http", "::1", 10001), {"Accept-Encoding": "gzip"}, None) == (
        b"PUT / HTTP/1.1\r\nAccept-Encoding: gzip\r\nHost: [::1]:10001\r\nContent-Length: 0\r\n\r\n"
    )
    with pytest.raises(ValueError, match="header"):
        request_bytes("GET", "/", key, {"x-evil": "a\r\nInjected: 1"}, None)
    with pytest.raises(ValueError, match="header"):
        request_bytes("GET", "/", key, {"bad name": "v"}, None)
    with pytest.raises(ValueError, match="request line"):
        request_bytes("GET", "/a b", key, {}, None)


def test_a_malformed_or_cut_answer_is_a_response_error() -> None:
    canned = _Canned([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nshort"])
    transport = LoopbackTransport(read_timeout_s=5)
    with pytest.raises(ServiceResponseError):
        transport.send(HttpRequest("GET", canned.url("/")))
    garbled = _Canned([b"NOT-HTTP\r\n\r\n"])
    with pytest.raises(ServiceResponseError):
        transport.send(HttpRequest("GET", garbled.url("/")))
    assert repr(transport) == "LoopbackTransport(connections=0)"
    transport.close()


def test_a_status_code_or_length_that_is_not_plain_digits_is_a_response_error_and_drops_the_connection() -> (
    None
):
    fresh = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh"
    canned = _Canned(
        [
            b"HTTP/1.1 2\xb20 OK\r\nContent-Length: 5\r\n\r\nstale",  # '2²0': isdigit(), yet not a number
            fresh,
            b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n0123456789",  # int() reads '1_0' as 10
            fresh,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nab\r\n0\r\n\r\n",  # not hex digits
            fresh,
        ]
    )
    transport = LoopbackTransport(read_timeout_s=5)
    for _ in range(3):
        with pytest.raises(ServiceResponseError):
            transport.send(HttpRequest("GET", canned.url("/")))
        answer = transport.send(HttpRequest("GET", canned.url("/")))
        assert (answer.status_code, answer.body()) == (200, b"fresh")  # not the rest of the bad one
    assert canned.connections == 4  # each bad answer closed its connection
    transport.close()


def test_bytes_past_an_answer_are_never_taken_for_the_next_requests_answer() -> None:
    canned = _Canned(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale",  # nothing asked for this one
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh",
        ]
    )
    transport = LoopbackTransport(read_timeout_s=5)
    assert transport.send(HttpRequest("GET", canned.url("/a"))).body() == b"ok"
    assert transport.send(HttpRequest("PUT", canned.url("/b"), data=b"x")).body() == b"fresh"
    assert canned.connections == 2
    transport.close()


def test_a_reset_after_part_of_an_answer_is_not_taken_for_a_close_before_the_request() -> None:
    """A connection reset once the server has begun answering means it had the request: not resent."""
    listener = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        requests.append(conn.recv(65536))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        requests.append(conn.recv(65536))
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\npart")
        threading.Event().wait(0.3)  # the client has read the part
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a reset
        listener.settimeout(1)
        with contextlib.suppress(TimeoutError):
            again, _ = listener.accept()
            requests.append(again.recv(65536))
            again.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    transport = LoopbackTransport(read_timeout_s=5)
    transport.send(HttpRequest("GET", f"{url}/first"))
    with pytest.raises(ServiceResponseError):
        transport.send(HttpRequest("POST", f"{url}/q/messages", data=b"m"))
    server.join(5)
    assert [r.split(b" ", 2)[1] for r in requests] == [b"/first", b"/q/messages"]  # sent once
    transport.close()
    listener.close()

    canned = _Canned(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.1 100 Continue\r\nConnection: close\r\n\r\n",  # then the connection closes
            b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
        ]
    )
    transport.send(HttpRequest("GET", canned.url("/first")))
    with pytest.raises(ServiceResponseError):
        transport.send(HttpRequest("POST", canned.url("/q/messages"), data=b"m"))
    assert len(canned.requests) == 2  # an interim answer came: the server had it, not resent
    transport.close()


def test_an_exchange_cut_short_by_an_interrupt_drops_its_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    canned = _Canned(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh",
        ]
    )
    transport = LoopbackTransport(read_timeout_s=5)
    transport.send(HttpRequest("GET", canned.url("/a")))
    real = Wire._read_head
    calls = [0]

    def interrupted(self: Wire) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise KeyboardInterrupt  # a stop signal, between the request and its answer
        return real(self)

    monkeypatch.setattr(Wire, "_read_head", interrupted)
    with pytest.raises(KeyboardInterrupt):
        transport.send(HttpRequest("GET", canned.url("/b")))
    answer = transport.send(HttpRequest("GET", canned.url("/c")))
    assert answer.body() == b"fresh"  # not the answer of the interrupted request
    assert canned.connections == 2
    transport.close()


def test_a_thread_that_ends_leaves_no_connection_open(server: _Server) -> None:
    """Worker threads come and go (the operator API's idle out after 10 s): each one's connections are
    closed with it, not kept open by the transport until it is closed."""
    transport = LoopbackTransport(read_timeout_s=5)
    for _ in range(3):
        worker = threading.Thread(target=lambda: transport.send(HttpRequest("GET", _url(server, "/a"))))
        worker.start()
        worker.join()
    assert repr(transport) == "LoopbackTransport(connections=0)"
    assert transport.send(HttpRequest("GET", _url(server, "/b"))).status_code == 201  # still serves
    transport.close()
