"""The wheel (``pip install .``) holds everything the Functions app imports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

_LOADED = (
    "import json, sys, function_app\n"
    "files = [getattr(m, '__file__', None) for m in list(sys.modules.values())]\n"
    "print(json.dumps(sorted(f for f in files if f)))"
)
"""Prints the files of every module ``import function_app`` loads, as the worker's indexing does."""


def _run(*command: str, cwd: Path = REPO) -> str:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_the_wheel_holds_every_module_the_functions_app_imports(tmp_path: Path) -> None:
    # Built from a copy of the tracked files: a build/ folder left in the checkout would hide a gap.
    source = tmp_path / "source"
    for name in _run("git", "ls-files").split():
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    wheel_dir = tmp_path / "wheel"
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(wheel_dir),
        ".",
        cwd=source,
    )
    [wheel] = wheel_dir.glob("orderflow-*.whl")
    packaged = set(zipfile.ZipFile(wheel).namelist())
    loaded = [Path(name).resolve() for name in json.loads(_run(sys.executable, "-c", _LOADED))]
    ours = sorted(
        path.relative_to(REPO).as_posix()
        for path in loaded
        if path.is_relative_to(REPO) and ".venv" not in path.parts
    )

    assert "function_app.py" in ours and "function_host/wiring.py" in ours and "orderflow/wiring.py" in ours
    assert [path for path in ours if path not in packaged] == []
