"""A sampling profile of one process under load (py-spy), and what its samples are spent in.

:class:`PySpy` runs ``py-spy record --gil --format raw --full-filenames --nonblocking`` against a pid
(py-spy reads the process's memory with ``ptrace``: it needs ``CAP_SYS_PTRACE`` or a permissive
``kernel.yama.ptrace_scope``) and stops it with SIGINT, when it writes the collapsed stacks: one line
per distinct stack, ``frame;frame;... count``, each frame ``function (path:line)``, outermost first.
Only the thread holding the GIL is sampled: a devhost process is one interpreter, and what holds its
GIL is what its CPU is spent on (py-spy's own idle detection counted sleeping timer threads and idle
pool workers as busy in a loaded process).

:func:`summarise_stacks` attributes each sample to a package: its innermost frame outside the
standard library (a ``socket.recv`` under ``urllib3`` is urllib3's; a sample wholly inside the
standard library stays there, named by its innermost module).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*):\d+\)$")
STDLIB = "stdlib"


def py_spy_path() -> str | None:
    """The py-spy executable beside this interpreter, or on PATH; None when neither has it."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def package_of(path: str, *, repo_root: str) -> str:
    """The package a frame's file belongs to: the top-level name under ``site-packages``, the top
    directory of the repository, or ``stdlib:<module>`` for anything else (the interpreter's library)."""
    if "site-packages/" in path:
        rest = path.split("site-packages/", 1)[1]
        top = rest.split("/", 1)[0]
        return top.removesuffix(".py")
    root = repo_root.rstrip("/") + "/"
    if path.startswith(root):
        return path[len(root) :].split("/", 1)[0].removesuffix(".py")
    return f"{STDLIB}:{Path(path).stem}"


def parse_stacks(text: str) -> list[tuple[list[tuple[str, str]], int]]:
    """Collapsed stacks as ``([(function, path), ...] outermost first, samples)``; bad lines are skipped."""
    out: list[tuple[list[tuple[str, str]], int]] = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for frame in stack.split(";"):
            match = _FRAME.match(frame)
            if match:
                frames.append((match["function"], match["path"]))
        out.append((frames, int(count)))
    return out


def _attributed(frames: Sequence[tuple[str, str]], repo_root: str) -> str:
    packages = [package_of(path, repo_root=repo_root) for _, path in frames]
    for package in reversed(packages):
        if not package.startswith(STDLIB):
            return package
    return packages[-1] if packages else "unknown"


def summarise_stacks(text: str, *, repo_root: str, top: int = 12) -> dict[str, Any]:
    """Shares of the samples by package, and the functions most often on top of the stack.

    Returns:
        ``samples`` (busy samples), ``by_package`` (package -> share of samples, 0-1, the ``top``
        largest, from :func:`package_of` of the innermost non-stdlib frame), ``inclusive`` (package ->
        share of samples with any frame in it, same packages) and ``top_functions``
        (``"function (package)"`` -> share, innermost frame).
    """
    stacks = parse_stacks(text)
    total = sum(count for _, count in stacks)
    owners: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for frames, count in stacks:
        if not frames:
            continue
        owners[_attributed(frames, repo_root)] += count
        for package in {package_of(path, repo_root=repo_root) for _, path in frames}:
            inclusive[package] += count
        function, path = frames[-1]
        leaves[f"{function} ({package_of(path, repo_root=repo_root)})"] += count

    def share(n: int) -> float:
        return round(n / total, 3) if total else 0.0

    chosen = [name for name, _ in owners.most_common(top)]
    return {
        "samples": total,
        "by_package": {name: share(owners[name]) for name in chosen},
        "inclusive": {name: share(inclusive[name]) for name in chosen},
        "top_functions": {name: share(n) for name, n in leaves.most_common(top)},
    }


class PySpy:
    """``py-spy record`` of one process, from :meth:`start` until :meth:`stop`.

    Args:
        pid: The process to sample.
        output: Where py-spy writes the collapsed stacks.
        rate: Samples per second.
    """

    def __init__(self, pid: int, output: Path, *, rate: int = 50) -> None:
        self.pid = pid
        self.output = output
        self.rate = rate
        self._process: subprocess.Popen[bytes] | None = None
        self.log = output.with_suffix(".log")

    def start(self) -> None:
        """Start sampling.

        Raises:
            FileNotFoundError: py-spy is not installed.
        """
        executable = py_spy_path()
        if executable is None:
            raise FileNotFoundError("py-spy is not installed (pip install -r requirements-dev.txt)")
        args = [executable, "record", "--pid", str(self.pid), "--format", "raw", "--full-filenames"]
        args += ["--gil", "--nonblocking", "--rate", str(self.rate), "--output", str(self.output)]
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def stop(self, timeout_s: float = 30.0) -> str:
        """Stop sampling and return the collapsed stacks ('' when py-spy wrote none: see :attr:`log`)."""
        if self._process is None:
            return ""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        return self.output.read_text(encoding="utf-8") if self.output.exists() else ""
