"""The record changes the protocol's model makes, as data: ``model/moves.txt``.

Each line is ``actor before after``: who changes a record (the model's ``A_*``) and the record before
and after as the model's ``PROJ`` numbers it (processState, whether a live attempt holds it, suspended,
cancel requested). The set is the union of exhaustive searches (:data:`SEARCHES`) compiled with the
model's ``MOVES`` and pan's ``-DPRINTF``. ``tests/model/test_machine_runs.py`` checks the hypothesis
protocol machine's runs against it, and that it holds every change of make test's own small searches.

    python scripts/model_moves.py            print the set
    python scripts/model_moves.py --write    rewrite model/moves.txt (make model-check compares)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "model" / "orderflow.pml"
MOVES = REPO / "model" / "moves.txt"
REQUESTS = ("CANCEL", "SUSPEND", "RESUBMIT", "REVIEW")
SEARCHES: tuple[tuple[str, ...], ...] = (
    ("-DF=1",),
    ("-DBUDGET", "-DF=1"),
    ("-DRESUBMIT", "-DF=1"),
    *((f"-D{request}", "-DF=1", "-DPERM=0") for request in REQUESTS),
    ("-DCANCEL", "-DRESUBMIT", "-DF=1", "-DPERM=0"),
    *((f"-D{a}", f"-D{b}", "-DF=0") for i, a in enumerate(REQUESTS) for b in REQUESTS[i + 1 :]),
    ("-DREVIEW", "-DSUP_MAX=1", "-DF=1", "-DPERM=0"),
)
"""The base model, the budget and each request with a failure (and a cancelled compensation that fails),
each pair of requests without, and a review whose attempt the supervisor gives up at its first recovery
(``SUPERVISOR_MAX_FAILURES`` 1: with the default ``SUP_MAX`` 2 giving up an order awaiting review takes
``F=2``, a search of minutes)."""

Move = tuple[int, int, int]


def moves_of(defines: tuple[str, ...], spin: str = "spin") -> set[Move]:
    """Every record change one search with ``defines`` makes.

    Raises:
        subprocess.CalledProcessError: spin, gcc or pan failed.
        RuntimeError: the search found an error (it stops there: the set would be short).
    """
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(MODEL, Path(folder) / MODEL.name)
        for command in (
            [spin, "-a", "-DMOVES", *defines, MODEL.name],
            ["gcc", "-O0", "-DCOLLAPSE", "-DNOCLAIM", "-DPRINTF", "-o", "pan", "pan.c"],
            ["./pan", "-m200000"],
        ):
            done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=True)
    if "errors: 0" not in done.stdout:
        raise RuntimeError(f"the search {' '.join(defines)} found an error:\n{done.stdout[-2000:]}")
    found = re.finditer(r"^MOVE (\d+) (\d+) (\d+)$", done.stdout, re.MULTILINE)
    return {(int(m.group(1)), int(m.group(2)), int(m.group(3))) for m in found}


def render(moves: set[Move]) -> str:
    """The file's text: one sorted ``actor before after`` line per change."""
    return "".join(f"{a} {b} {c}\n" for a, b, c in sorted(moves))


def read(text: str) -> set[Move]:
    """The set a ``moves.txt`` text holds."""
    rows = (line.split() for line in text.splitlines() if line.strip())
    return {(int(a), int(b), int(c)) for a, b, c in rows}


def main() -> int:
    """Print the set, or with ``--write`` rewrite ``model/moves.txt``; with ``--check`` exit 1 when
    the committed file differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {MOVES}")
    parser.add_argument("--check", action="store_true", help=f"compare with {MOVES}")
    args = parser.parse_args()
    moves: set[Move] = set()
    with ThreadPoolExecutor(max_workers=3) as pool:
        for found in pool.map(moves_of, SEARCHES):
            moves |= found
    text = render(moves)
    if args.write:
        MOVES.write_text(text, encoding="utf-8")
    elif args.check:
        if read(MOVES.read_text(encoding="utf-8")) != moves:
            print(f"{MOVES} is stale: python scripts/model_moves.py --write", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
