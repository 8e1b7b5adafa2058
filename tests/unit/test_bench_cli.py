"""``python -m bench`` as a command: one-line errors with their exit status, and SIGTERM taking Ctrl-C's
clean-up path (bench.__main__)."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import bench.__main__ as bench_main
from bench.config import BenchConfig
from tests.unit.stop_signals import error_line, guarded

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _restore_log_levels() -> Iterator[None]:
    """The command quietens whole logger trees (``orderflow``, ``azure`` ...) for its process; in the test
    process that would silence every later test's logs, so the levels are put back."""
    names = ("orderflow", "durabletask", "azure", "httpx", "urllib3", "demo")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def invoke(tmp_path: Path, *args: str) -> Result:
    return CliRunner().invoke(bench_main.app, ["--report", str(tmp_path / "bench-report.json"), *args])


@pytest.mark.parametrize(
    ("failure", "code", "expected"),
    [
        (RuntimeError("azurite did not start within 30 s; output:\nline 1\nline 2"), 1, "azurite did not"),
        (ValueError("the data set has 900 happy-path orders; 1000 are needed"), 2, "the data set has 900"),
    ],
)
def test_a_benchmark_that_cannot_run_is_one_line_with_its_status(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failure: Exception, code: int, expected: str
) -> None:
    def run_bench(config: BenchConfig, **kwargs: Any) -> dict[str, Any]:
        raise failure

    monkeypatch.setattr(bench_main, "run_bench", run_bench)

    result = invoke(tmp_path, "--orders", "5")

    assert result.exit_code == code, result.output
    line = error_line(result)
    assert line.startswith(f"error: {expected}")
    assert "Traceback" not in result.output


def test_sigterm_stops_the_benchmark_through_its_clean_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stopped: list[str] = []

    def run_bench(config: BenchConfig, **kwargs: Any) -> dict[str, Any]:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            stopped.append("emulators, demo services, devhost processes")
        raise AssertionError("not interrupted")

    monkeypatch.setattr(bench_main, "run_bench", run_bench)

    with guarded():
        result = invoke(tmp_path, "--orders", "5")

    assert result.exit_code == 143, result.output
    assert stopped == ["emulators, demo services, devhost processes"]
    assert error_line(result).startswith("stopped by SIGTERM")
    assert not (tmp_path / "bench-report.json").exists()


def test_cpu_pairs_reach_the_config_and_fewer_than_one_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[BenchConfig] = []

    def run_bench(config: BenchConfig, **kwargs: Any) -> dict[str, Any]:
        seen.append(config)
        raise RuntimeError("stop here")

    monkeypatch.setattr(bench_main, "run_bench", run_bench)

    assert invoke(tmp_path, "--cpu-pairs", "5").exit_code == 1
    assert invoke(tmp_path).exit_code == 1
    assert [config.cpu_pairs for config in seen] == [5, 3]

    refused = invoke(tmp_path, "--cpu-pairs", "0")
    assert refused.exit_code == 2
    assert error_line(refused).startswith("error: cpu_pairs: Input should be greater than or equal to 1")
