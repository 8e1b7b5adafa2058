"""Per-thread call profiles of chosen processes, installed at interpreter start (``sitecustomize``).

Put this folder first on ``PYTHONPATH`` and set ``CALL_PROFILE_DIR``: every Python process started as
``python -m <module>`` for a module named in ``CALL_PROFILE_MODULES`` (comma-separated; default the
devhost, its probe and its durabletask backend) profiles every thread it starts with ``cProfile`` on
the thread's CPU clock, and at exit writes the merged profile to
``$CALL_PROFILE_DIR/<module>[-<host id>]-<pid>.pstats`` (the host id of a ``--host-id`` argument).
Stdlib only, so that it also runs in a checkout of an older revision (whose ``bench`` package may lack
:mod:`bench.callcount`). Read the files with ``python -m bench.callcount``.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import pstats
import sys
import threading
import time

DEFAULT_MODULES = "devhost,bench.probe,devhost.durabletask_backend"


def _argument(flag: str) -> str | None:
    """The value after ``flag`` on this process's command line, or None."""
    argv: list[str] = list(getattr(sys, "orig_argv", sys.argv))
    for n, arg in enumerate(argv[:-1]):
        if arg == flag:
            return argv[n + 1]
    return None


def _install(out: str, name: str) -> None:
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start_thread_profile(*_event: object) -> None:
        # The first event of a new thread: its own profiler replaces this hook for the thread.
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.enable()

    def dump() -> None:
        threading.setprofile(None)
        merged: pstats.Stats | None = None
        with lock:
            taken = list(profiles)
        for profile in taken:
            profile.create_stats()
            if not getattr(profile, "stats", None):
                continue
            if merged is None:
                merged = pstats.Stats(profile)
            else:
                merged.add(profile)
        if merged is not None:
            merged.dump_stats(os.path.join(out, f"{name}-{os.getpid()}.pstats"))

    threading.setprofile(start_thread_profile)
    main = cProfile.Profile(time.thread_time)
    profiles.append(main)
    main.enable()
    atexit.register(dump)


def _maybe_install() -> None:
    out = os.environ.get("CALL_PROFILE_DIR")
    module = _argument("-m")
    chosen = {m.strip() for m in os.environ.get("CALL_PROFILE_MODULES", DEFAULT_MODULES).split(",")}
    if out and module in chosen:
        host = _argument("--host-id")  # a devhost's processes apart: demo-1, demo-agents
        _install(out, f"{module}-{host}" if host else module)


_maybe_install()
