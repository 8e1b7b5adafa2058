"""Running spin on ``model/orderflow.pml`` in a folder of its own (spin writes ``pan.c`` and trails to
the working directory), and reading pan's figures.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "model" / "orderflow.pml"

SAFETY = ("-DNOCLAIM",)
"""Compile flags of a safety run: assertions and invalid end states, without the LTL claim."""
LIVENESS = ()
"""Compile flags of a liveness run: the ``terminates`` claim, searched with ``pan -a -f``."""


@dataclass(frozen=True)
class PanResult:
    """What one pan search reported.

    Attributes:
        errors: The ``errors:`` figure (0: no counterexample).
        states: States stored.
        seconds: Wall time of spin, gcc and pan together.
        trail: Whether pan wrote a counterexample trail.
        output: pan's whole output, for failure messages.
    """

    errors: int
    states: int
    seconds: float
    trail: bool
    output: str


def run_pan(
    spin: str,
    workdir: Path,
    *,
    defines: tuple[str, ...] = (),
    liveness: bool = False,
    optimize: bool | None = None,
    timeout_s: float = 300,
) -> PanResult:
    """Generate, compile and run the verifier for the model with ``defines`` (``-DNAME=VALUE``);
    ``optimize`` compiles pan with ``-O2`` (default: for a liveness search).

    Raises:
        subprocess.CalledProcessError: spin or gcc refused the model.
    """
    started = time.monotonic()
    shutil.copy(MODEL, workdir / MODEL.name)
    flags = LIVENESS if liveness else SAFETY
    # gcc -O2 takes about 5 s on pan.c and pays off only on the long liveness search.
    level = "-O2" if (liveness if optimize is None else optimize) else "-O0"
    # NFAIR: weak fairness over all of the model's processes (pan's default covers fewer).
    for command in (
        [spin, "-a", *defines, MODEL.name],
        ["gcc", level, "-DCOLLAPSE", "-DNFAIR=4", *flags, "-o", "pan", "pan.c"],
    ):
        subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=True, timeout=timeout_s)
    search = ["./pan", "-m200000", *(["-a", "-f"] if liveness else [])]
    done = subprocess.run(search, cwd=workdir, capture_output=True, text=True, check=False, timeout=timeout_s)
    output = done.stdout + done.stderr
    errors = re.search(r"errors: (\d+)", output)
    states = re.search(r"(\d+) states, stored", output)
    assert errors is not None and states is not None, f"pan did not finish:\n{output}"
    return PanResult(
        errors=int(errors.group(1)),
        states=int(states.group(1)),
        seconds=time.monotonic() - started,
        trail=(workdir / f"{MODEL.name}.trail").exists(),
        output=output,
    )


def simulate(
    spin: str, workdir: Path, *, defines: tuple[str, ...] = (), seed: int, timeout_s: float = 60
) -> str:
    """A random run of the model (spin's simulation with ``seed``): its printed output."""
    shutil.copy(MODEL, workdir / MODEL.name)
    command = [spin, f"-n{seed}", "-u20000", *defines, MODEL.name]
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=True, timeout=timeout_s)
    return done.stdout


def follow_trail(spin: str, workdir: Path, *, defines: tuple[str, ...] = (), timeout_s: float = 60) -> str:
    """The printed output of the counterexample trail pan left in ``workdir`` (``spin -t``)."""
    command = [spin, "-t", *defines, MODEL.name]
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=True, timeout=timeout_s)
    return done.stdout
