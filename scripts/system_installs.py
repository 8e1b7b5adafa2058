"""No file under ``tests/`` may run a system package manager: ``make test`` installs the Debian packages
the suite needs (``scripts/prerequisites.sh``) before any test runs, and no test or fixture installs
anything.

``python scripts/system_installs.py [FOLDER]`` (``make lint``) scans ``FOLDER`` (default ``tests``): the
Python sources with :func:`package_manager_runs`, shell scripts and Makefiles line by line. It prints each
run it finds as ``path:line`` and exits 1, or exits 0 when there is none. A message that only names an
install command (``"apt-get install -y chromium"`` in a hint) is not a run.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE_MANAGERS = frozenset({"apt-get", "apt", "aptitude", "dpkg"})
"""Commands that install system packages: no file under ``tests/`` may run one."""
RUNNERS = frozenset(
    {
        "run",
        "Popen",
        "call",
        "check_call",
        "check_output",
        "getoutput",
        "getstatusoutput",
        "system",
        "popen",
        "execv",
        "execvp",
        "execvpe",
        "execl",
        "execlp",
        "spawnv",
        "spawnvp",
        "create_subprocess_exec",
        "create_subprocess_shell",
    }
)
"""Names of the functions that run a command (subprocess, os, asyncio)."""


def _program(value: object) -> str | None:
    """The program a command names (``sudo`` skipped, path stripped), or None for a non-command."""
    if isinstance(value, str):
        words = value.split()
    elif isinstance(value, list | tuple) and value and all(isinstance(word, str) for word in value):
        words = [str(word) for word in value]
    else:
        return None
    if words and Path(words[0]).name == "sudo":
        words = words[1:]
    return Path(words[0]).name if words else None


def _literal(node: ast.AST, names: dict[str, object]) -> object:
    """A string or list of strings written in the source (a module-level name resolved), else None."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _module_constants(tree: ast.Module) -> dict[str, object]:
    constants: dict[str, object] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name):
                constants[target.id] = _literal(statement.value, {})
    return constants


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else None


def package_manager_runs(source: str) -> list[int]:
    """Line numbers where Python source runs a system package manager: a command list or tuple whose
    program is one (wherever it is written, since a variable may carry it to the runner), or a runner
    (``subprocess.run``, ``os.system``, …) handed one as a string, list or module-level name."""
    tree = ast.parse(source)
    names = _module_constants(tree)
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple) and _program(_literal(node, names)) in PACKAGE_MANAGERS:
            found.add(node.lineno)
        elif isinstance(node, ast.Call) and _called_name(node) in RUNNERS:
            commands = [*node.args[:1], *(word.value for word in node.keywords if word.arg == "args")]
            if any(_program(_literal(command, names)) in PACKAGE_MANAGERS for command in commands):
                found.add(node.lineno)
    return sorted(found)


def shell_runs(text: str) -> list[int]:
    """Line numbers where a shell script or Makefile runs a system package manager."""
    return [
        number
        for number, line in enumerate(text.splitlines(), 1)
        if _program(line.strip()) in PACKAGE_MANAGERS
    ]


RUN_SAMPLES = (
    'import subprocess\nsubprocess.run(["apt-get", "install", "-y", "chromium"])\n',
    'import subprocess\ninstall = ["/usr/bin/apt-get", "install", "-y", "x"]\nsubprocess.run(install)\n',
    'import os\nos.system("sudo apt install -y chromium")\n',
    'import subprocess\nCMD = "dpkg -i x.deb"\nsubprocess.run(CMD, shell=True)\n',
    'import subprocess\nsubprocess.check_call(args=("aptitude", "install", "x"))\n',
    "def f(run):\n    for command in ([['apt-get', 'update']],):\n        run(command)\n",
)
"""Python sources that run a package manager, each in its own way: the scan must find every one."""

MESSAGE_SAMPLES = (
    'INSTALL = "apt-get install -y chromium"\nmessage = f"install it: {INSTALL}"\n',
    'import subprocess\nsubprocess.run(["git", "clone", "apt-get"])\n',
    'import shutil\nshutil.which("chromium")\n',
)
"""Python sources that only name a package manager: the scan must let them be."""


def runs_in_tree(folder: Path) -> dict[Path, list[int]]:
    """Each file under ``folder`` that runs a package manager, with the lines that do."""
    runs: dict[Path, list[int]] = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".py":
            lines = package_manager_runs(path.read_text(encoding="utf-8"))
        elif path.suffix in {".sh", ".bash"} or path.name == "Makefile":
            lines = shell_runs(path.read_text(encoding="utf-8"))
        else:
            continue
        if lines:
            runs[path] = lines
    return runs


def main(argv: list[str]) -> int:
    """Scan ``argv[0]`` (default ``tests``); 1 with a line per run found, else 0."""
    folder = Path(argv[0] if argv else "tests")
    runs = runs_in_tree(folder)
    for path, lines in runs.items():
        for line in lines:
            print(f"{path}:{line}: runs a system package manager (make system-deps installs packages)")
    return 1 if runs else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
