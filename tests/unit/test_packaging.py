"""The wheel (``pip install .``) holds what the Functions app and the ``orderflow`` command import, and
nothing else: not the local host, the demo, the benchmarks or the tests, which run from a checkout."""

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

APP_TOP_LEVEL = frozenset(
    {
        "function_app.py",
        "function_host",
        "orderflow",
        "orderflow_client",
        "devhost",
        "intake",
        "operator_api",
        "orchestrators",
        "activities",
        "agents",
        "supervisor",
    }
)
"""The wheel's top-level entries besides its metadata: the app's entry point and packages, the
``orderflow`` command's package and the local host whose Storage queues its submit, watch and cancel
use (both of which the Functions deployment package leaves out: .funcignore)."""

LEFT_OUT = ("demo", "bench", "tests")

_LOADED = (
    "import importlib, json, sys\n"
    "importlib.import_module(sys.argv[1])\n"
    "files = [getattr(m, '__file__', None) for m in list(sys.modules.values())]\n"
    "print(json.dumps(sorted(f for f in files if f)))"
)
"""Prints the files of every module that importing ``argv[1]`` loads."""


def _run(*command: str, cwd: Path = REPO) -> str:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the tracked files: a build/ folder left in the checkout would
    hide a gap."""
    source = tmp_path_factory.mktemp("source")
    for name in _run("git", "ls-files").split():
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    wheel_dir = tmp_path_factory.mktemp("wheel")
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
    [built] = wheel_dir.glob("orderflow-*.whl")
    return built


def _packaged(wheel: Path) -> set[str]:
    return set(zipfile.ZipFile(wheel).namelist())


def _ours_loaded_by(module: str) -> list[str]:
    """The repository's files that importing ``module`` from the checkout loads."""
    loaded = [Path(name).resolve() for name in json.loads(_run(sys.executable, "-c", _LOADED, module))]
    return sorted(
        path.relative_to(REPO).as_posix()
        for path in loaded
        if path.is_relative_to(REPO) and ".venv" not in path.parts
    )


@pytest.mark.parametrize(
    ("module", "expected"),
    [("function_app", "function_host/wiring.py"), ("orderflow_client.cli", "orderflow_client/cli_client.py")],
)
def test_the_wheel_holds_every_module_the_app_and_the_command_import(
    wheel: Path, module: str, expected: str
) -> None:
    ours = _ours_loaded_by(module)

    assert f"{module.replace('.', '/')}.py" in ours and expected in ours
    assert [path for path in ours if path not in _packaged(wheel)] == []


def test_the_wheel_holds_the_app_and_the_command_and_leaves_the_demo_benchmarks_and_tests_out(
    wheel: Path,
) -> None:
    top_level = {name.split("/", maxsplit=1)[0] for name in _packaged(wheel)}
    metadata = {name for name in top_level if name.endswith(".dist-info")}

    assert top_level - metadata == APP_TOP_LEVEL
    assert not set(LEFT_OUT) & top_level


def test_the_wheel_holds_every_file_of_the_web_console(wheel: Path) -> None:
    console = sorted(
        path.relative_to(REPO).as_posix() for path in (REPO / "operator_api" / "console").iterdir()
    )

    assert "operator_api/console/index.html" in console and "operator_api/console/main.js" in console
    assert [path for path in console if path not in _packaged(wheel)] == []


def test_the_installed_wheel_runs_the_app_and_the_command_without_the_checkout(
    wheel: Path, tmp_path: Path
) -> None:
    # Installed into a folder of its own and imported without site processing (the development
    # environment's editable install would find a missing module in the checkout), the checkout's
    # folder nowhere on the path: only the third-party libraries come from the environment.
    target = tmp_path / "installed"
    _run(sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel))
    libraries = [path for path in sys.path if path.endswith("site-packages")]
    script = (
        f"import json, sys\nsys.path[:0] = [{str(target)!r}]\nsys.path += {libraries!r}\n"
        "import function_app, orderflow_client.cli, devhost.wiring\n"
        "print(type(function_app.app).__name__)\n"
        "files = [getattr(m, '__file__', None) for m in list(sys.modules.values())]\n"
        "print(json.dumps(sorted(f for f in files if f)))"
    )
    out = _run(sys.executable, "-S", "-c", script, cwd=tmp_path).splitlines()
    files = [Path(name).resolve() for name in json.loads(out[-1])]

    assert out[-2] == "DFApp"
    assert target.resolve() / "function_app.py" in files
    assert target.resolve() / "orderflow_client" / "cli.py" in files
    assert target.resolve() / "devhost" / "queues" / "storage.py" in files  # the command's queues
    # The environment may live inside the checkout (.venv): its libraries are not the checkout's code.
    environment = Path(sys.prefix).resolve()
    assert [
        path for path in files if path.is_relative_to(REPO) and not path.is_relative_to(environment)
    ] == []
