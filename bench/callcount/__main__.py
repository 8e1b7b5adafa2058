"""``python -m bench.callcount BEFORE AFTER --orders N``: two call profiles side by side, per order."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.callcount import compare, per_order

app = typer.Typer(add_completion=False)


@app.command()
def main(
    before: Annotated[Path, typer.Argument(help="Profile of the earlier revision's process (.pstats).")],
    after: Annotated[Path, typer.Argument(help="Profile of the same process of the later revision.")],
    *,
    orders: Annotated[int, typer.Option(help="Orders each profile covers (warm-up included).")],
    before_root: Annotated[str, typer.Option(help="Checkout the earlier profile ran in.")],
    after_root: Annotated[str, typer.Option(help="Checkout the later profile ran in.")],
    by: Annotated[str, typer.Option(help="package or function.")] = "package",
    top: Annotated[int, typer.Option(help="Rows: the keys whose calls moved most.")] = 20,
) -> None:
    """Print the calls and own CPU (under the profiler) per order of both, totals first."""
    old = per_order(before, orders, root=before_root, by=by)
    new = per_order(after, orders, root=after_root, by=by)
    typer.echo(
        f"calls per order: {old.total_calls:,.0f} -> {new.total_calls:,.0f}; own CPU ms per order under the "
        f"profiler: {old.total_cpu_ms:.1f} -> {new.total_cpu_ms:.1f}"
    )
    for key, calls_before, calls_after, ms_before, ms_after in compare(old, new, top=top):
        calls = f"calls {calls_before:9.1f} -> {calls_after:9.1f}"
        typer.echo(f"{key[-70:]:70} {calls}   ms {ms_before:7.3f} -> {ms_after:7.3f}")


if __name__ == "__main__":
    app()
