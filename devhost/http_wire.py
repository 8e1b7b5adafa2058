"""HTTP/1.1 on a connected socket for the loopback transport (:mod:`devhost.http_transport`): a
request's bytes as ``http.client`` writes them, and the answer parsed without ``http.client``'s
``email``-based header parser, which costs more CPU than the rest of an exchange with an emulator."""

from __future__ import annotations

import http.client
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_HEAD_BYTES = 65536
"""The longest status line and header block an answer may have (bytes), as ``http.client``'s limits."""

BODYLESS_METHODS = frozenset({"HEAD"})
"""Methods whose answer has no body whatever its headers say."""

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""Methods whose request without a body still says ``Content-Length: 0`` (as ``http.client`` does)."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header name (RFC 9110's token)."""

_URL_FORBIDDEN = re.compile("[\x00-\x20\x7f]")
"""What a request target must not hold (``http.client``'s check: no control characters, no spaces)."""

_DIGITS = {10: re.compile(r"[0-9]+"), 16: re.compile(r"[0-9A-Fa-f]+")}
"""A length as RFC 9112 writes it: ASCII digits only (``int()`` also takes ``+``, ``_``, ``0x`` and
non-ASCII digits)."""


@dataclass(frozen=True)
class Answer:
    """One HTTP answer as read off the wire.

    Attributes:
        status: The status code.
        reason: The reason phrase.
        headers: ``(name, value)`` in the order received.
        body: The whole body (chunked transfer undone).
        closes: Whether the connection ends with this answer (``Connection: close``, HTTP/1.0 without
            keep-alive, or a body delimited by the end of the connection).
    """

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    closes: bool


def request_bytes(
    method: str, target: str, key: tuple[str, str, int], headers: Mapping[str, Any], body: bytes | None
) -> bytes:
    """The bytes of one HTTP/1.1 request, as ``http.client`` would write them: ``Host`` (with the port
    unless it is the scheme's default) and ``Accept-Encoding: identity`` unless ``headers`` name them,
    and ``Content-Length`` for a body, or ``0`` for a POST, PUT or PATCH without one, unless ``headers``
    give a length or a transfer coding.

    Args:
        method: The method, upper case.
        target: The path and query.
        key: ``(scheme, host, port)`` of the connection.
        headers: The request's headers; values are written with ``str()``.
        body: The body, or None.

    Raises:
        ValueError: a header name is not a token, a name or value holds CR or LF, or the target holds a
            control character, a space or a character outside ASCII (no request is then sent).
    """
    if _URL_FORBIDDEN.search(target) or not target.isascii() or _TOKEN.fullmatch(method) is None:
        raise ValueError(f"cannot send {method!r} {target!r}: not a valid request line")
    lines = [f"{method} {target} HTTP/1.1"]
    names: set[str] = set()
    for name, value in headers.items():
        text = str(value)
        if _TOKEN.fullmatch(name) is None or "\r" in text or "\n" in text:
            raise ValueError(f"header {name!r} cannot be sent as it is")
        names.add(name.lower())
        lines.append(f"{name}: {text}")
    if "host" not in names:
        scheme, host, port = key
        shown = f"[{host}]" if ":" in host else host
        default = 443 if scheme == "https" else 80
        lines.append(f"Host: {shown}" if port == default else f"Host: {shown}:{port}")
    if "accept-encoding" not in names:
        lines.append("Accept-Encoding: identity")
    if "content-length" not in names and "transfer-encoding" not in names:
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        elif method in BODY_METHODS:
            lines.append("Content-Length: 0")
    lines.append("\r\n")
    head = "\r\n".join(lines).encode("latin-1")
    return head + body if body else head


class Wire:
    """HTTP/1.1 exchanges on one connected socket, one at a time: the request's bytes written at once,
    the answer's status line, headers and body parsed here (``Content-Length``, chunked, or up to the end
    of the connection; none for HEAD, 1xx, 204 and 304). Bytes past an answer, which no request asked
    for since requests are never pipelined, stay unread (:attr:`pending`).

    Args:
        sock: The connected socket (plain or TLS).
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._timeout: float | None = None
        self._answering = False  # a byte of the current answer has arrived

    @property
    def pending(self) -> bool:
        """Whether bytes past the last answer were read: the connection is then out of step."""
        return bool(self._buffer)

    def exchange(self, data: bytes, method: str, *, timeout: float) -> Answer:
        """Send ``data`` and read its answer, each socket operation waiting at most ``timeout`` seconds.

        Raises:
            http.client.RemoteDisconnected: the connection closed (or was reset) before any byte of an
                answer.
            http.client.HTTPException: a malformed or incomplete answer (one cut by a reset too: the
                server had the request).
            TimeoutError, OSError: as the socket raises them.
        """
        if timeout != self._timeout:
            self._sock.settimeout(timeout)
            self._timeout = timeout
        self._answering = False
        self._sock.sendall(data)
        while True:
            version, status, reason, headers = self._read_head()
            if not 100 <= status < 200 or status == 101:
                break  # an interim answer (100 Continue) precedes the real one
        fields = {name.lower(): value.lower() for name, value in headers}
        connection = fields.get("connection", "")
        closes = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
        if method in BODYLESS_METHODS or status in (101, 204, 304):
            body = b""
        elif "chunked" in fields.get("transfer-encoding", ""):
            body = self._read_chunked()
        elif "content-length" in fields:
            body = self._read_exactly(_length(fields["content-length"]))
        else:
            body, closes = self._read_to_end(), True
        return Answer(status, reason, headers, body, closes)

    def _receive(self) -> bool:
        """Append what the socket has to the buffer; False at the end of the connection.

        Raises:
            http.client.IncompleteRead: the connection was reset once the answer had begun.
        """
        try:
            chunk = self._sock.recv(65536)
        except ConnectionResetError as exc:
            if self._answering:
                raise http.client.IncompleteRead(bytes(self._buffer)) from exc
            raise
        self._buffer += chunk
        self._answering = self._answering or bool(chunk)
        return bool(chunk)

    def _read_head(self) -> tuple[str, int, str, list[tuple[str, str]]]:
        end = self._buffer.find(b"\r\n\r\n")
        while end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("answer's header block")
            seen = len(self._buffer)
            if not self._receive():
                if seen or self._answering:  # part of this head, or an interim answer, came
                    raise http.client.IncompleteRead(bytes(self._buffer))
                raise http.client.RemoteDisconnected("Remote end closed connection without response")
            end = self._buffer.find(b"\r\n\r\n", max(0, seen - 3))
        head = self._buffer[:end].decode("iso-8859-1")
        del self._buffer[: end + 4]
        status_line, *lines = head.split("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or _DIGITS[10].fullmatch(code) is None or len(code) != 3:
            raise http.client.BadStatusLine(status_line)
        headers: list[tuple[str, str]] = []
        for line in lines:
            if line[:1] in (" ", "\t") and headers:  # an obsolete folded continuation
                name, value = headers[-1]
                headers[-1] = (name, f"{value} {line.strip()}")
                continue
            name, colon, value = line.partition(":")
            if not colon or _TOKEN.fullmatch(name) is None:
                raise http.client.HTTPException(f"malformed header line {line!r}")
            headers.append((name, value.strip()))
        return version, int(code), reason.strip(), headers

    def _read_line(self) -> bytes:
        end = self._buffer.find(b"\r\n")
        while end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("chunk size line")
            if not self._receive():
                raise http.client.IncompleteRead(bytes(self._buffer))
            end = self._buffer.find(b"\r\n")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not self._receive():
                raise http.client.IncompleteRead(bytes(self._buffer), size - len(self._buffer))
        body = bytes(self._buffer[:size])
        del self._buffer[:size]
        return body

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = _length(self._read_line().split(b";", 1)[0].decode("ascii", "replace"), base=16)
            if size == 0:
                break
            parts.append(self._read_exactly(size))
            if self._read_exactly(2) != b"\r\n":
                raise http.client.HTTPException("a chunk does not end with CRLF")
        while self._read_line():
            pass  # trailer fields, up to the empty line
        return b"".join(parts)

    def _read_to_end(self) -> bytes:
        while self._receive():
            pass
        body = bytes(self._buffer)
        self._buffer.clear()
        return body


def _length(text: str, *, base: int = 10) -> int:
    """A body or chunk length from its header or size line.

    Raises:
        http.client.HTTPException: not a non-negative integer in plain ASCII digits.
    """
    digits = text.strip()
    if _DIGITS[base].fullmatch(digits) is None:
        raise http.client.HTTPException(f"invalid length {text!r}")
    return int(digits, base)
