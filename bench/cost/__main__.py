"""``python -m bench.cost``: print the cost and latency model's figures, write them into
``bench-report.json`` (its ``cost`` section) when that file exists, and with ``--write-docs`` render the
cost section of ``docs/deploy.md`` and the README's cost sentence from the checked-in inputs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.cost.docs import replace_between, section
from bench.cost.inputs import counts_from_report
from bench.cost.render import BEGIN, END, SENTENCE_BEGIN, SENTENCE_END, figures, sentence

REPO = Path(__file__).resolve().parents[2]
DEPLOY_DOC = REPO / "docs" / "deploy.md"
README = REPO / "README.md"


def write_docs(deploy: Path = DEPLOY_DOC, readme: Path = README) -> None:
    """Render the checked-in inputs' section into ``deploy`` and their sentence into ``readme``.

    Raises:
        ValueError: A file lacks its markers.
    """
    deploy.write_text(
        replace_between(deploy.read_text(encoding="utf-8"), BEGIN, END, section()), encoding="utf-8"
    )
    body = f"{SENTENCE_BEGIN}{sentence(figures())}{SENTENCE_END}"
    readme.write_text(
        replace_between(readme.read_text(encoding="utf-8"), SENTENCE_BEGIN, SENTENCE_END, body),
        encoding="utf-8",
    )


def main(argv: list[str] | None = None) -> int:
    """Run the command; 0 on success."""
    parser = argparse.ArgumentParser(prog="python -m bench.cost", description=__doc__)
    parser.add_argument(
        "--report", type=Path, default=Path("bench-report.json"), help="bench report to read and update"
    )
    parser.add_argument(
        "--write-docs", action="store_true", help="render docs/deploy.md's section and the README"
    )
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text(encoding="utf-8")) if args.report.exists() else None
    fig = figures(counts_from_report(report)) if report is not None else figures()
    for system, figs in fig["cost"].items():
        per_million = ", ".join(f"{k}/month ${v:,.2f}" for k, v in figs["per_million"].items())
        print(f"{system}: per million orders at {per_million}; idle ${figs['idle_month']:,.2f} a month")
    for config, loads in fig["latency_s"].items():
        for load, (p50, p95) in loads.items():
            print(f"latency, {config}, {load}: p50 {p50:.2f} s, p95 {p95:.2f} s")
    print(sentence(fig))
    if report is not None:
        report["cost"] = fig
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote the cost section of {args.report}")
    if args.write_docs:
        write_docs()
        print(f"rendered {DEPLOY_DOC.relative_to(REPO)} and {README.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
