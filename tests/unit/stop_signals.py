"""Test helpers for commands that handle stop signals: a SIGTERM or SIGHUP the command under test fails
to handle fails the test instead of ending the pytest process."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

from typer.testing import Result


class NotHandledHere(Exception):
    """Raised by :func:`guarded` when the code under test did not install a handler of its own."""


@contextmanager
def guarded() -> Iterator[None]:
    """Within the block, an unhandled SIGTERM or SIGHUP raises :class:`NotHandledHere`."""

    def unhandled(signum: int, _frame: object) -> None:
        raise NotHandledHere(signum)

    previous = {sig: signal.signal(sig, unhandled) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def error_line(result: Result) -> str:
    """The command's one line on stderr (fails when there is not exactly one)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]
