"""What the machine must have: ``scripts/prerequisites.sh`` checks it, and installs the Debian packages,
before ``make test`` or ``make demo`` runs anything; no test or fixture installs a system package; the
README's set-up table is the script's own list.

The script runs with a ``PATH`` of this test's making, so a command can be missing (``chromium``,
``apt-get``) or stand in (an ``apt-get`` that records its arguments, an ``id`` that is not root)
whatever this machine has installed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "prerequisites.sh"
CHECK = REPO / "scripts" / "system_installs.py"


def _check() -> ModuleType:
    """``scripts/system_installs.py``, the check ``make lint`` runs (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("system_installs", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCAN = _check()


@pytest.mark.parametrize("source", SCAN.RUN_SAMPLES)
def test_the_scan_finds_a_package_manager_run(source: str) -> None:
    assert SCAN.package_manager_runs(source)


@pytest.mark.parametrize("source", SCAN.MESSAGE_SAMPLES)
def test_the_scan_lets_a_message_naming_the_command_be(source: str) -> None:
    assert SCAN.package_manager_runs(source) == []


def test_no_file_under_tests_runs_a_package_manager() -> None:
    runs = {str(path.relative_to(REPO)): lines for path, lines in SCAN.runs_in_tree(REPO / "tests").items()}
    assert runs == {}, "system packages are installed by make system-deps, never by a test"


def test_the_check_command_names_each_run_and_fails(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(SCAN.RUN_SAMPLES[0], encoding="utf-8")
    (tmp_path / "test_y.py").write_text(SCAN.MESSAGE_SAMPLES[0], encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(CHECK), str(tmp_path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'test_x.py'}:2: runs a system package manager (make system-deps installs packages)"
    ]
    (tmp_path / "test_x.py").unlink()
    clean = subprocess.run([sys.executable, str(CHECK), str(tmp_path)], capture_output=True, check=False)
    assert (clean.returncode, clean.stdout) == (0, b"")


# --- the script ---------------------------------------------------------------------------------


@pytest.fixture
def bin_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder that is the whole ``PATH``: the commands the script uses (``spin`` and ``gcc`` as stand-ins),
    and no chromium or apt-get."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for command in ("bash", "find", "id", "mktemp", "tail", "rm", "node", "npm", "git", "make", "sh", "env"):
        found = shutil.which(command)
        assert found is not None, f"{command} is needed to run this test"
        (folder / command).symlink_to(found)
    # Present whatever this machine has: these tests follow chromium, the one package left missing.
    for command in ("spin", "gcc"):
        _fake(folder, command, "exit 0")
    yield folder


def _fake(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(0o755)


def _pythons() -> dict[str, str]:
    """Interpreters for the script's Python checks: this one for every version, so a wrong version
    shows; the versions this test does not look at are checked as make would pass them."""
    return {"PYTHON": sys.executable, "PYTHON312": sys.executable, "PYTHON313": sys.executable}


def _run(bin_dir: Path, target: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "bash"), str(SCRIPT), target],
        env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/root"), **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _needs_only(result: subprocess.CompletedProcess[str], word: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("orderflow: make test needs")]
    mentioning = [line for line in lines if word in line]
    assert len(mentioning) == 1, result.stderr
    return mentioning[0]


def test_without_apt_get_a_missing_chromium_is_one_line_with_the_install_command(bin_dir: Path) -> None:
    result = _run(bin_dir, "test", **_pythons())

    assert result.returncode == 1
    line = _needs_only(result, "chromium")
    assert "apt-get install -y chromium" in line
    assert "installing" not in result.stdout


def test_a_failed_install_is_said_with_apt_gets_last_words(bin_dir: Path) -> None:
    (bin_dir / "id").unlink()
    _fake(bin_dir, "id", "echo 0")
    _fake(bin_dir, "apt-get", 'case "$1" in install) echo "E: Unable to locate package $4"; exit 100;; esac')

    result = _run(bin_dir, "test", **_pythons())

    assert result.returncode == 1
    assert "E: Unable to locate package chromium" in result.stderr
    assert "could not install" in _needs_only(result, "chromium")


def test_not_root_nothing_is_installed_and_the_command_is_said(bin_dir: Path, tmp_path: Path) -> None:
    calls = tmp_path / "apt-calls"
    (bin_dir / "id").unlink()
    _fake(bin_dir, "id", "echo 1000")
    _fake(bin_dir, "apt-get", f'echo "$@" >> {calls}')

    result = _run(bin_dir, "test", **_pythons())

    assert result.returncode == 1
    assert "(as root)" in _needs_only(result, "chromium")
    assert not calls.exists()


def test_as_root_the_missing_package_is_installed_before_anything_runs(bin_dir: Path, tmp_path: Path) -> None:
    calls = tmp_path / "apt-calls"
    chromium = bin_dir / "chromium"
    (bin_dir / "id").unlink()
    _fake(bin_dir, "id", "echo 0")
    _fake(
        bin_dir,
        "apt-get",
        f'echo "$@" >> {calls}\n'
        f'case "$1" in install) printf "#!/bin/sh\\n" > {chromium}; /bin/chmod 755 {chromium};; esac',
    )

    result = _run(bin_dir, "test", PYTHON=sys.executable)

    installs = [line for line in calls.read_text().splitlines() if line.startswith("install")]
    assert installs == ["install -y -q chromium"]
    assert calls.read_text().splitlines()[-1] == "install -y -q chromium", "nothing after the install"
    assert "installing Debian packages: apt-get install -y chromium" in result.stdout
    assert "chromium" not in result.stderr
    assert chromium.exists()


def test_a_package_apt_get_could_not_install_is_said(bin_dir: Path) -> None:
    (bin_dir / "id").unlink()
    _fake(bin_dir, "id", "echo 0")
    _fake(bin_dir, "apt-get", "exit 0")

    result = _run(bin_dir, "test", **_pythons())

    assert result.returncode == 1
    assert "apt-get install --reinstall -y chromium" in _needs_only(result, "chromium")


def test_a_wrong_python_is_named_with_its_install_command(bin_dir: Path) -> None:
    result = _run(bin_dir, "demo", PYTHON=str(bin_dir / "bash"))

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "orderflow: make demo needs Python 3.11: pyenv install 3.11, or make demo PYTHON=/path/to/python3.11 "
        f"(PYTHON: {bin_dir / 'bash'} is not a Python)"
    ]


def test_another_python_version_is_named_with_what_was_found(bin_dir: Path) -> None:
    _fake(bin_dir, "python3", "echo 3.12")

    result = _run(bin_dir, "demo", PYTHON=str(bin_dir / "python3"))

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "orderflow: make demo needs Python 3.11: pyenv install 3.11, or make demo PYTHON=/path/to/python3.11 "
        f"(PYTHON: {bin_dir / 'python3'} is Python 3.12)"
    ]


def test_a_python_without_venv_support_is_named_with_the_package_that_adds_it(bin_dir: Path) -> None:
    _fake(bin_dir, "python3.11", 'case "$2" in *ensurepip*) exit 1;; *) echo 3.11;; esac')

    result = _run(bin_dir, "demo", PYTHON=str(bin_dir / "python3.11"))

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "orderflow: make demo needs Python 3.11 with venv: apt-get install -y python3.11-venv, "
        f"or pyenv install 3.11 ({bin_dir / 'python3.11'} has no ensurepip)"
    ]


def test_the_demo_needs_no_browser(bin_dir: Path) -> None:
    assert sys.version_info[:2] == (3, 11), "the suite runs on .venv's Python 3.11"

    result = _run(bin_dir, "demo", PYTHON=sys.executable)

    assert (result.returncode, result.stderr) == (0, "")


def test_node_missing_is_one_line(bin_dir: Path) -> None:
    (bin_dir / "node").unlink()

    result = _run(bin_dir, "demo", PYTHON=sys.executable)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "orderflow: make demo needs Node.js 20 or newer with npm on PATH: apt-get install -y nodejs npm "
        "(Debian 13 or newer), or any Node.js 20+ install"
    ]


def test_make_test_stops_before_pytest_when_chromium_is_missing(bin_dir: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", checkout / "Makefile")
    shutil.copy(SCRIPT, checkout / "scripts" / SCRIPT.name)

    result = subprocess.run(
        [str(bin_dir / "make"), "-C", str(checkout), "test", *(f"{k}={v}" for k, v in _pythons().items())],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert result.returncode == 2
    assert "apt-get install -y chromium" in _needs_only(result, "chromium")
    assert sorted(path.name for path in checkout.iterdir()) == ["Makefile", "scripts"], "nothing else ran"


def test_the_readme_shows_the_scripts_list_and_nothing_else() -> None:
    listed = subprocess.run(
        ["bash", str(SCRIPT), "--list"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    header = readme.index(listed[0])
    table = readme[header : readme.index("", header)]

    assert table == listed
    assert sum(line.startswith("| prerequisite |") for line in readme) == 1
