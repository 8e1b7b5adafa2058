"""The Functions deployment package: ``.funcignore`` keeps the app and leaves everything else out.

Every tracked file (``git ls-files``) and the local artefacts ``.gitignore`` keeps out of git are
matched against ``.funcignore`` twice: with git's rules (``pathspec``), and the way Azure Functions
Core Tools reads the file when it packs an app, which is not git's: Core Tools turns each line into a
regular expression anchored at the project root (``**`` any characters, ``*`` any but ``/``) and
denies a path that starts with a match. The two readings must agree, so the package is the same
whichever tool builds it. azure-functions-doctor (``make doctor``) skips what the package leaves out
(``[tool.azure-functions-doctor].exclude`` in ``pyproject.toml``), so it judges the app that ships.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pathspec
import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
LINES = (REPO / ".funcignore").read_text(encoding="utf-8").splitlines()

APP_FILES = frozenset({"function_app.py", "host.json", "requirements.txt"})
APP_PACKAGES = (
    "function_host",
    "orderflow",
    "intake",
    "operator_api",
    "orchestrators",
    "activities",
    "agents",
    "supervisor",
)
"""What the Functions app needs at run time: its entry point, host settings, dependencies and packages."""

LOCAL_ARTEFACTS = (
    ".venv/bin/python",
    ".venv-worker/bin/python",
    ".venv-py312/bin/python",
    ".venv-infra/bin/checkov",
    ".venv/lib/python3.11/site-packages/azure/functions/__init__.py",
    "node_modules/@azure/cosmos/package.json",
    "__pycache__/function_app.cpython-311.pyc",
    "orderflow/__pycache__/wiring.cpython-311.pyc",
    "orderflow/queues/__pycache__/servicebus.cpython-312.pyc",
    ".mypy_cache/3.11/orderflow/wiring.meta.json",
    ".ruff_cache/CACHEDIR.TAG",
    ".pytest_cache/v/cache/lastfailed",
    ".hypothesis/examples/0/1",
    ".data/azurite/__blobstorage__/x",
    ".run/host-1.log",
    ".test-artifacts/console-dashboard.png",
    "demo-report.json",
    "chaos-report.json",
    "bench-report.json",
    "local.settings.json",
    "orderflow.egg-info/PKG-INFO",
    "build/lib/orderflow/wiring.py",
    ".git/HEAD",
    ".git/objects/pack/pack-0.pack",
    ".azure/orderflow-dev/.env",
    ".azure/config.json",
    ".env",
    ".idea/workspace.xml",
)
"""Files that exist only on a developer's machine: the repository's own database, azd's environments
and what ``.gitignore`` keeps out of git."""


def _tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return sorted(name for name in listed.stdout.decode("utf-8").split("\0") if name)


def _core_tools_regex(pattern: str) -> re.Pattern[str]:
    """One ``.funcignore`` line as Core Tools compiles it: a leading ``/`` dropped, regex characters
    escaped, ``**`` any characters, ``*`` any characters but ``/``, anchored at the start only."""
    escaped = re.sub(r"[-\[\]/{}()+?.\\^$|]", lambda match: "\\" + match.group(0), pattern.removeprefix("/"))
    return re.compile(escaped.replace("**", "(.+)").replace("*", "([^/]+)"))


PATTERNS = [line.strip() for line in LINES if line.strip() and not line.strip().startswith("#")]
GIT_READING = pathspec.GitIgnoreSpec.from_lines(LINES)
CORE_TOOLS_READING = [_core_tools_regex(pattern) for pattern in PATTERNS]


def _git_excludes(path: str) -> bool:
    return bool(GIT_READING.match_file(path))


def _core_tools_excludes(path: str) -> bool:
    return any(regex.match(path) for regex in CORE_TOOLS_READING)


def _top(path: str) -> str:
    return path.split("/", maxsplit=1)[0]


def _is_app_file(path: str) -> bool:
    return path in APP_FILES or (_top(path) in APP_PACKAGES and "__pycache__" not in path)


def test_the_readings_agree_on_every_file_and_nothing_is_negated() -> None:
    assert PATTERNS, ".funcignore lists nothing"
    assert not [p for p in PATTERNS if p.startswith("!")]
    # A pattern is rooted, or the bare name of a folder that may sit at any depth.
    assert not [p for p in PATTERNS if not (p.startswith("/") or re.fullmatch(r"(\*\*/)?[\w.-]+/", p))]
    for path in [*_tracked_files(), *LOCAL_ARTEFACTS]:
        assert _git_excludes(path) == _core_tools_excludes(path), path


def test_the_package_holds_exactly_the_tracked_files_of_the_functions_app() -> None:
    tracked = _tracked_files()
    packaged = {path for path in tracked if not _git_excludes(path)}
    assert packaged == {path for path in tracked if _is_app_file(path)}
    assert packaged >= APP_FILES
    assert {_top(path) for path in packaged} == APP_FILES | set(APP_PACKAGES)


@pytest.mark.parametrize(
    "folder", ["tests", "demo", "bench", "devhost", "orderflow_client", "docs", "emulators", ".ci", "infra"]
)
def test_every_tracked_file_of_the_development_folders_stays_out(folder: str) -> None:
    files = [path for path in _tracked_files() if path.startswith(f"{folder}/")]
    assert files, f"nothing tracked under {folder}/"
    assert [path for path in files if not _git_excludes(path)] == []
    assert [path for path in files if not _core_tools_excludes(path)] == []


@pytest.mark.parametrize(
    "path",
    [
        "local.settings.example.json",
        "docker-compose.yml",
        "Makefile",
        "README.md",
        "pyproject.toml",
        "requirements-dev.txt",
        "requirements-client.txt",
        "requirements-infra.txt",
        "azure.yaml",
        "package.json",
        "package-lock.json",
        ".gitignore",
        ".funcignore",
    ],
)
def test_the_repository_files_beside_the_app_stay_out(path: str) -> None:
    assert (REPO / path).is_file()
    assert _git_excludes(path) and _core_tools_excludes(path)


@pytest.mark.parametrize("path", LOCAL_ARTEFACTS)
def test_local_environments_caches_data_reports_and_settings_stay_out(path: str) -> None:
    assert _git_excludes(path) and _core_tools_excludes(path)


def test_every_module_the_app_imports_is_in_the_package() -> None:
    # What the worker loads when it indexes the app: function_app and everything it imports.
    script = (
        "import json, sys, function_app\n"
        "print(json.dumps(sorted({getattr(m, '__file__', None) or '' for m in list(sys.modules.values())})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded = [Path(name) for name in json.loads(result.stdout) if name]
    ours = sorted(
        path.resolve().relative_to(REPO).as_posix()
        for path in loaded
        if path.resolve().is_relative_to(REPO) and ".venv" not in path.parts
    )
    assert "function_app.py" in ours and "orderflow/wiring.py" in ours and "supervisor/sweep.py" in ours
    assert [path for path in ours if _git_excludes(path) or _core_tools_excludes(path)] == []


def test_the_client_package_is_never_in_the_deployment_package() -> None:
    # The CLI and the client SDK are installed where they run (requirements-client.txt); the core, whose
    # name the package's begins with, stays in (Core Tools matches each line as a prefix).
    client_files = [path for path in _tracked_files() if _top(path) == "orderflow_client"]

    assert "orderflow_client/cli.py" in client_files and "orderflow_client/client.py" in client_files
    assert [path for path in client_files if not (_git_excludes(path) and _core_tools_excludes(path))] == []
    assert not _git_excludes("orderflow/records.py") and not _core_tools_excludes("orderflow/records.py")


def test_the_package_holds_the_web_console() -> None:
    console = [path for path in _tracked_files() if path.startswith("operator_api/console/")]

    assert "operator_api/console/index.html" in console and "operator_api/console/console.css" in console
    assert [path for path in console if _git_excludes(path) or _core_tools_excludes(path)] == []


def test_the_doctor_skips_the_files_the_package_leaves_out_and_none_it_holds() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    excludes = pyproject["tool"]["azure-functions-doctor"]["exclude"]

    def skipped(path: str) -> bool:  # the doctor's reading of an exclude: the path, or a folder of it
        return any(fnmatch(path, glob) or fnmatch(path, f"{glob}/*") for glob in excludes)

    tracked = _tracked_files()
    # The files the doctor scans (Python, JSON, Bicep) are skipped exactly when they are not packaged.
    scanned = [path for path in tracked if path.endswith((".py", ".json", ".bicep"))]
    assert {path for path in scanned if skipped(path)} == {path for path in scanned if _git_excludes(path)}
    for glob in excludes:  # and no exclude is stale
        assert [path for path in tracked if skipped(path) and fnmatch(path, f"{glob}*")], glob
