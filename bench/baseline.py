"""orderflow as it was before the current CPU target's work, measured again in this run by its own benchmark.

The CPU an order costs moves with the machine: on the 2-core machine of docs/benchmarks.md the same
code measured 60 to 116 ms per order in runs within an hour. A figure taken on another day is therefore
no yardstick for "three quarters of what it cost", so the run measures the code of
:data:`BASELINE_REVISION` again, with that revision's own ``python -m bench``: its own emulators, devhost
processes and probes, the same number of orders (chosen the same way from the same data set, for its own
count of runs, so the set can differ), concurrency and warm-up, its throughput windows only (its other
parts run at their smallest sizes). The revision is checked out with ``git worktree add`` under the run's
directory and removed afterwards; it shares this checkout's ``node_modules`` and TPC-H data set (read
only) and this interpreter. ``--baseline fe3526f`` measures against the commit that added these
measurements, before every cut of docs/benchmarks.md.

Each orderflow figure compared is ``cpu_ms_per_order["orderflow"]`` of the same process count: the
devhost processes and their durabletask backends (at fe3526f the backend ran inside the devhost, so
both figures count the same work there too).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from devhost.emulators import REPO_ROOT

logger = logging.getLogger(__name__)

BASELINE_REVISION = "74cd56a"
"""The last commit before claim on submit, the cost model and the CPU cuts measured against it in
docs/benchmarks.md (its "Against 74cd56a" sections)."""

SHARED = ("node_modules", ".data")
"""What the baseline checkout borrows from this one (npm packages, the TPC-H data set)."""

STOP_GRACE_S = 60.0
"""How long an interrupted baseline benchmark may take to stop what it started, seconds."""

CPU_TARGET = 0.75
"""The target: CPU per order in orderflow's processes at most three quarters of the baseline's."""


PARTS_OFF: Mapping[str, str] = {"--baseline": "", "--cpu-pairs": "1", "--sdk-calls": "0"}
"""Options of later revisions' benchmarks whose parts no comparison reads, and the values that turn them
off: without them a revision measured as the baseline would measure its own baseline too (and that one
perhaps its own), every CPU pair of it, and its SDK calls. Passed only where the revision has them: an
earlier revision's benchmark refuses an option it does not know."""


class BaselineUnavailable(RuntimeError):
    """The baseline revision could not be checked out (no git, a shallow clone, an unknown revision)."""


def _git(repo: Path, *args: str, silent_failure: str | None = None) -> str:
    """``git -C repo args...``'s output, stripped.

    Raises:
        BaselineUnavailable: git is not installed, or failed: its message, or ``silent_failure`` when it
            printed none (``--quiet``).
    """
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=120
        )
    except FileNotFoundError as exc:
        raise BaselineUnavailable("git is not installed") from exc
    except subprocess.CalledProcessError as exc:
        message = exc.stderr.strip()[:200]
        if not message and silent_failure:
            raise BaselineUnavailable(silent_failure) from exc
        raise BaselineUnavailable(f"git {' '.join(args[:2])}: {message or f'exit {exc.returncode}'}") from exc
    return done.stdout.strip()


def revision_options(checkout: Path) -> frozenset[str]:
    """The options the benchmark in ``checkout`` takes (``--orders``...), read from its ``--help``; none
    when it prints no help (its options are then left as :func:`baseline_command` always passes them)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench", "--help"],
            check=False,
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    if done.returncode != 0:
        return frozenset()
    return frozenset(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", done.stdout))


def baseline_command(
    *,
    orders: int,
    concurrency: int,
    warmup: int,
    processes: Sequence[int],
    timeout_s: float,
    report: Path,
    known: frozenset[str] = frozenset(),
) -> list[str]:
    """The baseline revision's benchmark: the throughput windows asked for, everything else smallest, and
    the parts of :data:`PARTS_OFF` among its ``known`` options (:func:`revision_options`) turned off."""
    options: dict[str, object] = {
        "--orders": orders,
        "--concurrency": concurrency,
        "--warmup": warmup,
        "--processes": ",".join(str(p) for p in processes),
        "--single-processes": "",
        "--profile-processes": 0,
        "--count-orders": 1,
        "--sweep-sizes": 1,
        "--sweep-expired": 1,
        "--hard-down-orders": 1,
        "--peers": "",
        "--timeout-s": timeout_s,
        "--report": report,
        **{option: value for option, value in PARTS_OFF.items() if option in known},
    }
    return [sys.executable, "-m", "bench", *(str(part) for item in options.items() for part in item)]


def summarise(report: Mapping[str, Any], revision: str) -> dict[str, Any]:
    """The baseline's figures by process count, from its own report: CPU ms per order (each process
    and ``orderflow``), throughput (orders/s), p50 latency (seconds) and outcomes."""
    windows: dict[str, Any] = {}
    for processes, run in (report.get("orderflow", {}).get("runs") or {}).items():
        measured = run.get("measured") or {}
        windows[str(processes)] = {
            "cpu_ms_per_order": dict(measured.get("cpu_ms_per_order") or {}),
            "throughput_per_s": run.get("throughput_per_s"),
            "p50_s": (run.get("latency") or {}).get("p50_s"),
            "outcomes": dict(run.get("outcomes") or {}),
        }
    return {"revision": revision, "windows": windows}


def cpu_ratios(
    baseline: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Now ÷ baseline of CPU ms per order in orderflow's processes, for each process count both have.

    Pair 1 is ``runs``' window and ``baseline``'s; ``baseline["more_pairs"]`` (by process count, each a
    list of ``{"pair", "now_ms", "baseline_ms", ...}``: :func:`bench.runner.run_bench`, ``--cpu-pairs``)
    adds the pairs measured after them; a pair missing a figure (a side failed) is left out. ``ratio`` is
    the median of the pairs' ratios and ``met`` when it is at most :data:`CPU_TARGET`; ``now_ms`` and
    ``baseline_ms`` are each side's median, and ``pairs`` each pair's ratio by its number. The machine's
    speed moves between windows minutes apart (docs/benchmarks.md), so one pair is a sample, not a
    verdict.
    """
    out: dict[str, dict[str, Any]] = {}
    for processes, window in (baseline.get("windows") or {}).items():
        now_run = runs.get(processes) or {}
        first = {
            "pair": 1,
            "now_ms": ((now_run.get("measured") or {}).get("cpu_ms_per_order") or {}).get("orderflow"),
            "baseline_ms": (window.get("cpu_ms_per_order") or {}).get("orderflow"),
        }
        if not _complete(first):
            continue
        more = (baseline.get("more_pairs") or {}).get(processes) or []
        pairs = {str(p["pair"]): (p["now_ms"], p["baseline_ms"]) for p in (first, *more) if _complete(p)}
        ratio = statistics.median(now / before for now, before in pairs.values())
        out[processes] = {
            "baseline_ms": statistics.median(before for _, before in pairs.values()),
            "now_ms": statistics.median(now for now, _ in pairs.values()),
            "ratio": round(ratio, 2),
            "target": CPU_TARGET,
            "met": ratio <= CPU_TARGET,  # unrounded: 0.754 is not three quarters
            "pairs": {pair: round(now / before, 2) for pair, (now, before) in pairs.items()},
        }
    return out


def _complete(pair: Mapping[str, Any]) -> bool:
    """Whether a pair has both figures (a baseline of 0 ms would divide by zero: not a figure)."""
    return pair.get("now_ms") is not None and bool(pair.get("baseline_ms"))


def _run_to_end(command: list[str], *, cwd: Path, log: IO[str], timeout_s: float) -> int:
    """Run the baseline's benchmark and return its exit code (1 when one of its parts failed; its report
    is still written). On an interruption or a timeout it is sent SIGTERM, on which it stops what it
    started (its emulators and devhost processes run in sessions of their own), like ``make bench``."""
    process = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return process.wait(timeout=timeout_s)
    except BaseException:
        _stop(process)
        raise


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after :data:`STOP_GRACE_S` or a second interruption (what it started in
    sessions of its own is then left to the clean-up its SIGTERM began)."""
    try:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=STOP_GRACE_S)
    except BaseException:
        process.kill()
        process.wait()


def baseline_run(
    *,
    revision: str,
    orders: int,
    concurrency: int,
    warmup: int,
    processes: Sequence[int],
    run_dir: Path,
    timeout_s: float,
    repo: Path = REPO_ROOT,
) -> dict[str, Any]:
    """Check ``revision`` of ``repo`` out under ``run_dir``, run its benchmark once for each of
    ``processes`` (each run on emulators of its own, as this benchmark's windows are), and return
    :func:`summarise` of their reports together, with ``exit_code`` (the first that was not 0, else 0)
    and their own ``FAILED`` notes (``failed``).

    The output of each goes to ``run_dir/baseline-<n>.log``, its report to
    ``run_dir/baseline-report-<n>.json`` (``n`` its process count) and their run directories (their
    processes' logs) to ``run_dir/baseline-run``; the checkout is removed.

    Raises:
        BaselineUnavailable: the revision could not be checked out.
        RuntimeError: none of its runs wrote a report (their logs say why).
    """
    commit = _git(
        repo,
        "rev-parse",
        "--verify",
        "--quiet",
        f"{revision}^{{commit}}",
        silent_failure=f"no commit {revision!r} in {repo} (an unknown revision, or a clone without that "
        "history)",
    )
    checkout = run_dir / "baseline"
    _git(repo, "worktree", "add", "--detach", str(checkout), commit)
    try:
        for shared in SHARED:
            if (repo / shared).exists():
                (checkout / shared).symlink_to(repo / shared)
        known = revision_options(checkout)
        windows: dict[str, Any] = {}
        codes: list[int] = []
        failed: dict[str, None] = {}
        reported = False
        for count in processes:
            report_path = run_dir / f"baseline-report-{count}.json"
            command = baseline_command(
                orders=orders,
                concurrency=concurrency,
                warmup=warmup,
                processes=(count,),
                timeout_s=timeout_s,
                report=report_path,
                known=known,
            )
            with (run_dir / f"baseline-{count}.log").open("w", encoding="utf-8") as log:
                codes.append(_run_to_end(command, cwd=checkout, log=log, timeout_s=timeout_s * 3 + 600))
            if not report_path.exists():
                continue  # its window is missing: the caller fails the run for it
            reported = True
            report = json.loads(report_path.read_text(encoding="utf-8"))
            windows.update(summarise(report, commit[:12])["windows"])
            failed.update(
                dict.fromkeys(str(n) for n in report.get("notes", []) if str(n).startswith("FAILED"))
            )
        exit_code = next((code for code in codes if code != 0), 0)
        if not reported:
            raise RuntimeError(f"the baseline's benchmark exited {exit_code} without a report")
        return {"revision": commit[:12], "windows": windows, "exit_code": exit_code, "failed": list(failed)}
    finally:
        _remove(repo, checkout, keep=run_dir / "baseline-run")


def _remove(repo: Path, checkout: Path, *, keep: Path) -> None:
    """Move the checkout's run directory to ``keep``, then remove the checkout; a failure to remove it
    is logged, never raised over the run's result or error."""
    with contextlib.suppress(OSError):
        (checkout / ".run").rename(keep)
    try:
        _git(repo, "worktree", "remove", "--force", str(checkout))
    except BaselineUnavailable as exc:
        logger.warning("removing the baseline checkout %s failed (%s); removing its files", checkout, exc)
        shutil.rmtree(checkout, ignore_errors=True)
        with contextlib.suppress(BaselineUnavailable):
            _git(repo, "worktree", "prune")
