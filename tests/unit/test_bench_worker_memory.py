"""The worker's memory figure: read from the interpreter's own VmHWM, and a clear error when the worker's
venv is missing or the app does not import (the real import runs in tests/integration/test_bench_smoke)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.worker_memory import worker_footprint

pytestmark = pytest.mark.unit


def _interpreter(path: Path, script: str) -> Path:
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


def test_the_figure_is_the_interpreters_own_peak_in_mb(tmp_path: Path) -> None:
    status = "Name:\\tpython\\nVmHWM:\\t  110000 kB\\nVmRSS:\\t  90000 kB"
    python = _interpreter(tmp_path / "python", f'printf "{status}\\n"')
    figures = worker_footprint(python, tmp_path)
    assert figures["peak_rss_mb"] == 112.6  # 110,000 KiB
    assert figures["python"] == str(python)


def test_a_missing_venv_a_failed_import_and_a_missing_figure_each_say_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not set up"):
        worker_footprint(tmp_path / "absent", tmp_path)
    failing = _interpreter(tmp_path / "failing", 'echo "ModuleNotFoundError: function_app" >&2; exit 1')
    with pytest.raises(RuntimeError, match="ModuleNotFoundError: function_app"):
        worker_footprint(failing, tmp_path)
    silent = _interpreter(tmp_path / "silent", "echo 42")
    with pytest.raises(RuntimeError, match="no VmHWM"):
        worker_footprint(silent, tmp_path)
