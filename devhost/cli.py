"""What the local commands share: one-line errors, and stop signals that take Ctrl-C's clean-up path.

The drivers (``python -m demo.run``, ``python -m demo.chaos``, ``python -m bench``) start
children in sessions of their own (emulators, demo services, devhost processes), so a signal sent to
the driver's process group never reaches them: only the driver's own clean-up stops them. Ctrl-C runs
that clean-up (a ``KeyboardInterrupt`` unwinds every ``finally`` and ``ExitStack``); SIGTERM and
SIGHUP, left to their default, kill the driver on the spot and orphan everything it started.
:func:`stop_signals_interrupt` makes them raise the same exception, so ``timeout 120 make demo`` or
closing the terminal cleans up too.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from orderflow.errors import OrderflowError

logger = logging.getLogger(__name__)

errors = Console(stderr=True, soft_wrap=True, highlight=False)
"""Where the one-line errors go (stderr; no wrapping, so a message stays one line)."""

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGHUP")
    if hasattr(signal, name)  # no SIGHUP on Windows
)
"""Signals a driver treats as Ctrl-C. SIGINT keeps Python's own handler (already a KeyboardInterrupt)."""

SERVER_STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, *STOP_SIGNALS)
"""Signals that stop a long-running command (a devhost process, the emulators): Ctrl-C's included, so a
second Ctrl-C cannot cut its clean-up short either."""


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, at most 300 characters (its type name when it has none)."""
    if isinstance(exc, ValidationError):
        # pydantic's text spans several lines with links; the field and the problem are enough.
        return "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        )[:300]
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def print_error(message: str) -> None:
    """Print ``error: <message>`` as one line on stderr (the message is not read as markup)."""
    errors.print(f"[red]error:[/red] {escape(message)}")


def fail(message: str, *, code: int) -> NoReturn:
    """Print ``error: <message>`` as one line on stderr and exit with ``code``.

    Args:
        message: What went wrong and, when it helps, which argument or setting to change.
        code: 2 for bad arguments or settings, 1 for a failure while running.

    Raises:
        typer.Exit: always, with ``code``.
    """
    print_error(message)
    raise typer.Exit(code)


class StopSignal(KeyboardInterrupt):
    """A stop signal (SIGTERM, SIGHUP) received by the main thread, raised where Ctrl-C's
    ``KeyboardInterrupt`` would be, so the same ``except`` and ``finally`` blocks handle it.

    Attributes:
        signum: The signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def interrupt_exit_code(exc: KeyboardInterrupt) -> int:
    """The shell's exit status for a process stopped by ``exc``: 128 + the signal's number (130 for a
    plain Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + (exc.signum if isinstance(exc, StopSignal) else signal.SIGINT)


class StopRequests:
    """The state of :func:`stop_signals_interrupt`'s handler.

    Attributes:
        stopping: A stop signal was acted on (or :meth:`ignore_more` was called): later ones are ignored.
        signum: The stop signal the handler took, if any.
    """

    def __init__(self) -> None:
        self.stopping = False
        self.signum: int | None = None

    def ignore_more(self) -> None:
        """Ignore stop signals from now on: a clean-up has begun and must not be cut short."""
        self.stopping = True

    def wait(self, done: threading.Event | None = None, *, poll_s: float = 0.5) -> None:
        """Block until ``done`` is set (forever without one) or a stop signal is taken.

        The handler's exception normally interrupts the wait itself. Python runs a handler at the next
        bytecode of the main thread, which may belong to a garbage-collector callback: there the
        exception is reported as unraisable and dropped. The signal is recorded as well, so the wait
        raises it at its next check instead of blocking forever.

        Args:
            done: Set by whoever ends the wait normally (the host's stop event).
            poll_s: Seconds between checks for a signal whose exception was dropped.

        Raises:
            StopSignal: a stop signal was taken and its exception did not arrive here.
        """
        done = done if done is not None else threading.Event()
        while not done.wait(poll_s):
            self.raise_if_dropped()

    def raise_if_dropped(self) -> None:
        """Raise the stop signal the handler took, for a loop that waits on something else than
        :meth:`wait` (see there why the handler's own exception may not have arrived).

        Raises:
            StopSignal: a stop signal was taken.
        """
        if self.signum is not None:
            raise StopSignal(self.signum)


@contextmanager
def stop_signals_interrupt(signals: Iterable[signal.Signals] = STOP_SIGNALS) -> Iterator[StopRequests]:
    """Within the block, the first of ``signals`` raises :class:`StopSignal` in the main thread.

    Later ones are logged and ignored, so they cannot cut short the clean-up the first one started
    (``timeout``, ``make`` and the terminal may each send one). The previous handlers are restored on
    leaving. Outside the main thread, where Python delivers no signal, the block runs unchanged.

    Args:
        signals: The signals to turn into :class:`StopSignal` (default :data:`STOP_SIGNALS`).

    Yields:
        The handler's state, to ignore signals during a clean-up that began for another reason.
    """
    requests = StopRequests()
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if requests.stopping:
            logger.info("signal %s: already stopping", signum)
            return
        requests.stopping = True
        requests.signum = signum
        raise StopSignal(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in signals}
    try:
        yield requests
    finally:
        for sig, handler in previous.items():
            # None: the previous handler was not installed from Python; the default is the best guess.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


@contextmanager
def driver_signals() -> Iterator[None]:
    """For a driver command: SIGTERM and SIGHUP interrupt it as Ctrl-C does; an interrupted run, once
    its clean-up has run, prints one line and exits 128 + the signal's number (130 for Ctrl-C).

    Raises:
        typer.Exit: the block was interrupted (Ctrl-C, SIGTERM or SIGHUP).
    """
    with stop_signals_interrupt():
        try:
            yield
        except KeyboardInterrupt as exc:
            reason = str(exc) if isinstance(exc, StopSignal) else "interrupted"
            errors.print(f"[red]{reason}[/red]: everything the run started has been stopped")
            raise typer.Exit(interrupt_exit_code(exc)) from None


RUNTIME_ERRORS = (RuntimeError, OSError, OrderflowError)
"""Failures of a run (a child that did not start, a missing tool, a store that refused): one line, exit 1."""

_T = TypeVar("_T")


def run_driver(check: Callable[[], object], run: Callable[[], _T]) -> _T:
    """A driver command's body: ``check`` its arguments, then ``run`` under :func:`driver_signals`.

    Returns:
        What ``run`` returned.

    Raises:
        typer.Exit: 2 after one line when ``check`` raises ValueError (nothing was started); 1 after one
            line when ``run`` raises one of :data:`RUNTIME_ERRORS`; 128 + the signal when interrupted.
    """
    try:
        check()
    except ValueError as exc:
        fail(str(exc), code=2)
    with driver_signals():
        try:
            return run()
        except RUNTIME_ERRORS as exc:
            fail(one_line(exc), code=1)
