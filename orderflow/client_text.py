r"""Text a client controls, made safe wherever an operator sees it (docs/operations.md#client-text).

Message ids, correlation ids, bodies and free-text fields come from clients and may hold anything a
Python ``str`` can: control characters (ESC starts a terminal's CSI and OSC sequences), bidi
overrides, line breaks, lone surrogates. Three renderings, each used at one edge:

- :func:`encodable`: for JSON answers, which must be valid UTF-8. A lone surrogate (what a
  ``surrogateescape`` decode makes of a byte that is not UTF-8, or a JSON ``"\udcff"`` escape) has no
  UTF-8 encoding; it becomes U+FFFD, the replacement character.
- :func:`visible`: for terminals and log lines. Every character Python does not count as printable
  (:meth:`str.isprintable`: C0 and C1 controls, DEL, format characters such as bidi overrides and
  zero-width ones, surrogates, private-use and unassigned code points, separators other than the ASCII
  space) is shown as its Python escape: ``\n``, ``\x1b``, ``\u202e``, ``\udcff``. Other text is
  left as it is, so it stays readable; nothing is removed, so the text stays recognisable.
- :func:`log_value`: a field of a ``key=value`` event line, quoted when it could be read as more than
  one field.
"""

from __future__ import annotations

import re
from typing import Final

_SURROGATES: Final = re.compile("[\ud800-\udfff]")

REPLACEMENT: Final = "\ufffd"
"""What :func:`encodable` puts in place of a surrogate."""

MAX_LOG_VALUE_CHARS: Final = 256
"""Longest event field value logged whole (characters, before escaping); a longer one is cut there."""

_NAMED_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_FIELD_BREAKERS: Final = frozenset(' ="\\')
"""Characters that, unquoted, would end a field value or start another field."""


def encodable(text: str) -> str:
    """``text`` with each surrogate code point replaced by U+FFFD, so that it encodes as UTF-8.

    Returns:
        ``text`` itself when it holds no surrogate.
    """
    return _SURROGATES.sub(REPLACEMENT, text)


def visible(text: str) -> str:
    r"""``text`` with every character that is not printable shown as its Python escape: an ESC as the
    four characters ``\x1b``, a line feed as ``\n``. What a terminal would have run as a command, or a
    log reader taken for a new line, is printed as text.

    Returns:
        A string of printable characters only (no control, format or surrogate code point, no line
        break); ``text`` itself when it is printable already.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def log_value(value: object) -> str:
    r"""``value`` as the value of a ``key=value`` field: bare when it is one printable word, else in
    double quotes with ``\`` and ``"`` escaped and the rest made :func:`visible`, as a Python string
    literal would be written. Longer than :data:`MAX_LOG_VALUE_CHARS`, it is cut there and the number
    of characters left out follows the closing quote.

    Returns:
        ``order-7``, ``"two words"``, ``"a\nb"``, ``""`` (empty), ``"xx...x"+1744`` (cut).
    """
    text = f"{value}"
    if text and text.isprintable() and _FIELD_BREAKERS.isdisjoint(text) and len(text) <= MAX_LOG_VALUE_CHARS:
        return text
    cut = len(text) - MAX_LOG_VALUE_CHARS
    shown = text[:MAX_LOG_VALUE_CHARS] if cut > 0 else text
    quoted = '"' + visible(shown.replace("\\", "\\\\").replace('"', '\\"')) + '"'
    return f"{quoted}+{cut}" if cut > 0 else quoted
