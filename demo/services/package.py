"""``python -m demo.services.package [--clean]``: assemble the demo services' Function App package in
``demo/services/azure/`` (azd service ``demo-services``; azure.yaml runs it before and after packaging).

The folder holds the entry point (``function_app.py``) and ``host.json``; this adds what they import and
read: the ``demo`` modules the services use, the ``orderflow`` core they import the app role and bindings
from, ``requirements.txt`` (the app's pins plus FastAPI's) and the TPC-H tables the services load their
stock and customers from (the driver's own copy, so both sides read the same data). ``--clean`` removes
what it added.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from demo.tpch import REQUIRED_TABLES, ensure_dataset

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(__file__).resolve().parent / "azure"
"""The azd project folder of the demo services."""
TRACKED = frozenset({"function_app.py", "host.json"})
"""What the folder holds in the repository; everything else in it is built."""
DEMO_MODULES = ("__init__.py", "faults.py", "tpch.py")
"""The ``demo`` package's modules the services import, beside ``demo/services``."""
DATA_DIR = REPO / ".data" / "tpch"


def requirements() -> str:
    """The package's requirements.txt: the Functions app's pins and FastAPI's (requirements-dev.txt)."""
    app = (REPO / "requirements.txt").read_text(encoding="utf-8")
    dev = (REPO / "requirements-dev.txt").read_text(encoding="utf-8").splitlines()
    fastapi = [line for line in dev if line.startswith("fastapi==")]
    if len(fastapi) != 1:
        raise ValueError("requirements-dev.txt pins no fastapi version")
    return f"{app.rstrip()}\n# The demo services' web framework.\n{fastapi[0]}\n"


def clean(target: Path = PACKAGE) -> None:
    """Remove everything in ``target`` but :data:`TRACKED`."""
    for path in target.iterdir():
        if path.name in TRACKED:
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def build(target: Path = PACKAGE, *, data_dir: Path = DATA_DIR) -> Path:
    """Assemble the package in ``target`` (cleaned first); returns ``target``.

    Raises:
        FileNotFoundError, RuntimeError: the TPC-H tables cannot be generated (tpchgen-cli).
    """
    clean(target)
    if target != PACKAGE:
        for name in TRACKED:
            shutil.copy2(PACKAGE / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "azure")
    shutil.copytree(REPO / "orderflow", target / "orderflow", ignore=ignore)
    (target / "demo").mkdir()
    for module in DEMO_MODULES:
        shutil.copy2(REPO / "demo" / module, target / "demo" / module)
    shutil.copytree(REPO / "demo" / "services", target / "demo" / "services", ignore=ignore)
    (target / "requirements.txt").write_text(requirements(), encoding="utf-8")
    tables = ensure_dataset(data_dir)
    (target / "tpch").mkdir()
    for table in REQUIRED_TABLES:
        shutil.copy2(tables / f"{table}.csv", target / "tpch" / f"{table}.csv")
    return target


def main(argv: list[str] | None = None) -> int:
    """Build (or with ``--clean`` remove) the package; 0, or 1 after one line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m demo.services.package", description=__doc__)
    parser.add_argument("--clean", action="store_true", help="remove what a build added")
    args = parser.parse_args(argv)
    try:
        clean() if args.clean else build()
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"{parser.prog}: error: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
