"""The baseline revision measured again in the same run: checked out, run, read, compared, removed.

The checkout and the run are real (git worktrees of a repository made here, a stand-in benchmark that
writes a report from its arguments); the report read is the shape the baseline revision's own benchmark
writes (``tests/data/bench-baseline-report.json``, its throughput windows from a run of it on
2026-12-01, trimmed to what is read).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bench import cpu_pairs
from bench.baseline import (
    BASELINE_REVISION,
    CPU_TARGET,
    BaselineUnavailable,
    baseline_command,
    baseline_run,
    cpu_ratios,
    revision_options,
    summarise,
)
from bench.config import BenchConfig
from bench.parts import Parts, failures
from bench.report import build_report, core_speed, machine_info, markdown_tables

BASELINE_REPORT = Path(__file__).parents[1] / "data" / "bench-baseline-report.json"

STAND_IN = """
import json, sys
args = sys.argv[1:]
if args == ["--help"]:
    print("Options: --orders --report --processes --baseline --cpu-pairs")  # a revision without --sdk-calls
    sys.exit(0)
report = args[args.index("--report") + 1]
processes = args[args.index("--processes") + 1].split(",")
runs = {
    p: {"throughput_per_s": 5.0, "latency": {"p50_s": 3.0}, "outcomes": {"Processed": 3},
        "measured": {"cpu_ms_per_order": {"orderflow": 100.0 * int(p), "devhost-1": 90.0}}}
    for p in processes
}
json.dump({"orderflow": {"runs": runs}, "argv": args, "notes": ["FAILED: a part"]}, open(report, "w"))
import os
os.makedirs(".run/bench-1", exist_ok=True)
open(".run/bench-1/devhost-1.log", "w").write("its log")
sys.exit(1)
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _commit_all(repo: Path, message: str) -> None:
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", message)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose one commit has a stand-in ``bench`` package (``python -m bench``)."""
    root = tmp_path / "repo"
    (root / "bench").mkdir(parents=True)
    (root / "bench" / "__init__.py").write_text("")
    (root / "bench" / "__main__.py").write_text(STAND_IN)
    (root / "node_modules").mkdir()
    _git(root, "init", "-q")
    _git(root, "add", "bench")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "stand-in")
    return root


def test_the_baseline_revision_is_checked_out_run_read_and_removed(repo: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    head = _git(repo, "rev-parse", "HEAD")

    summary = baseline_run(
        revision="HEAD",
        orders=7,
        concurrency=3,
        warmup=2,
        processes=(1, 2),
        run_dir=run_dir,
        timeout_s=60,
        repo=repo,
    )

    assert summary["revision"] == head[:12]
    assert (summary["exit_code"], summary["failed"]) == (1, ["FAILED: a part"])
    # Its processes' logs outlive the checkout.
    assert (run_dir / "baseline-run" / "bench-1" / "devhost-1.log").read_text() == "its log"
    assert summary["windows"]["2"]["cpu_ms_per_order"]["orderflow"] == 200.0
    assert summary["windows"]["1"]["outcomes"] == {"Processed": 3}
    # One run of its benchmark per process count, each on emulators of its own.
    for count in ("1", "2"):
        argv = json.loads((run_dir / f"baseline-report-{count}.json").read_text())["argv"]
        assert argv[argv.index("--processes") + 1] == count
        assert (run_dir / f"baseline-{count}.log").exists()
    assert argv[argv.index("--orders") + 1] == "7"
    assert argv[argv.index("--concurrency") + 1] == "3"
    assert argv[argv.index("--warmup") + 1] == "2"
    assert argv[argv.index("--peers") + 1] == ""
    # Its own baseline and CPU pairs are off, as far as it has them: an option it lacks is not passed.
    assert argv[argv.index("--baseline") + 1] == ""
    assert argv[argv.index("--cpu-pairs") + 1] == "1"
    assert "--sdk-calls" not in argv
    # The checkout is gone, and git no longer lists it.
    assert not (run_dir / "baseline").exists()
    assert _git(repo, "worktree", "list").count("\n") == 0


def _one_order(repo: Path, run_dir: Path, revision: str, processes: tuple[int, ...] = (1,)) -> dict[str, Any]:
    return baseline_run(
        revision=revision,
        orders=1,
        concurrency=1,
        warmup=0,
        processes=processes,
        run_dir=run_dir,
        timeout_s=10,
        repo=repo,
    )


def test_an_unknown_revision_is_unavailable_and_checks_nothing_out(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(BaselineUnavailable) as refused:
        _one_order(repo, tmp_path, "0" * 40)
    assert str(refused.value) == (
        f"no commit {'0' * 40!r} in {repo} (an unknown revision, or a clone without that history)"
    )
    assert not (tmp_path / "baseline").exists()


def test_a_baseline_that_writes_no_report_is_an_error_and_leaves_no_checkout(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "bench" / "__main__.py").write_text("import sys\nsys.exit(3)\n")
    _commit_all(repo, "fails")
    with pytest.raises(RuntimeError, match="exited 3 without a report"):
        _one_order(repo, tmp_path, "HEAD")
    assert not (tmp_path / "baseline").exists()
    assert _git(repo, "worktree", "list").count("\n") == 0


def test_the_baseline_revision_is_the_commit_before_claim_on_submit() -> None:
    message = _git(Path(__file__).parents[2], "log", "-1", "--format=%s", f"{BASELINE_REVISION}^{{commit}}")
    assert message.startswith("queues: one RetryPauses gives the jittered, doubling pauses")
    assert CPU_TARGET == 0.75


def test_the_baseline_benchmark_runs_only_its_throughput_windows_at_their_smallest() -> None:
    command = baseline_command(
        orders=300, concurrency=32, warmup=10, processes=(1, 2), timeout_s=900, report=Path("r.json")
    )
    assert command[:3] == [sys.executable, "-m", "bench"]
    options = dict(zip(command[3::2], command[4::2], strict=True))
    assert options == {
        "--orders": "300",
        "--concurrency": "32",
        "--warmup": "10",
        "--processes": "1,2",
        "--single-processes": "",
        "--profile-processes": "0",
        "--count-orders": "1",
        "--sweep-sizes": "1",
        "--sweep-expired": "1",
        "--hard-down-orders": "1",
        "--peers": "",
        "--timeout-s": "900",
        "--report": "r.json",
    }


def test_a_later_revision_as_the_baseline_measures_no_baseline_pairs_or_sdk_calls_of_its_own() -> None:
    # Run with only the options above, a revision whose benchmark has them measured its own baseline (and
    # that one's CPU pairs) inside each of this run's baseline windows: three runs deep, for nothing read.
    known = revision_options(Path(__file__).parents[2])
    assert {"--orders", "--baseline", "--cpu-pairs", "--sdk-calls"} <= known
    command = baseline_command(
        orders=3, concurrency=1, warmup=0, processes=(2,), timeout_s=60, report=Path("r.json"), known=known
    )
    options = dict(zip(command[3::2], command[4::2], strict=True))
    assert (options["--baseline"], options["--cpu-pairs"], options["--sdk-calls"]) == ("", "1", "0")


def test_the_options_of_a_benchmark_that_prints_no_help_are_none(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__main__.py").write_text("import sys; sys.exit(2)")

    assert revision_options(tmp_path) == frozenset()


def test_the_baseline_report_is_read_as_its_revision_wrote_it() -> None:
    summary = summarise(json.loads(BASELINE_REPORT.read_text()), "fe3526f")
    assert summary["windows"]["2"]["cpu_ms_per_order"]["orderflow"] == 113.3
    assert summary["windows"]["2"]["throughput_per_s"] == 4.87
    assert summary["windows"]["1"]["p50_s"] == 3.366
    assert summary["windows"]["1"]["outcomes"] == {"Processed": 300}


def _now(cpu_ms: float) -> dict[str, object]:
    measured = {
        "cpu_ms_per_order": {"orderflow": cpu_ms},
        "http_per_order": {},
        "grpc_per_order": {},
        "limited_by": "waiting, not CPU",
    }
    return {"throughput_per_s": 16.0, "measured": measured}


def test_the_cpu_ratio_is_now_over_baseline_and_met_at_three_quarters_or_less() -> None:
    summary = summarise(json.loads(BASELINE_REPORT.read_text()), "fe3526f")
    ratios = cpu_ratios(summary, {"1": _now(78.0), "2": _now(90.0), "3": _now(50.0)})
    assert ratios == {
        "1": {
            "baseline_ms": 104.6,
            "now_ms": 78.0,
            "ratio": 0.75,
            "target": 0.75,
            "met": True,
            "pairs": {"1": 0.75},
        },
        "2": {
            "baseline_ms": 113.3,
            "now_ms": 90.0,
            "ratio": 0.79,
            "target": 0.75,
            "met": False,
            "pairs": {"1": 0.79},
        },
    }
    # Compared unrounded: 0.754 is shown as 0.75 and is not three quarters.
    assert cpu_ratios(summary, {"1": _now(78.87)})["1"] == {
        "baseline_ms": 104.6,
        "now_ms": 78.87,
        "ratio": 0.75,
        "target": 0.75,
        "met": False,
        "pairs": {"1": 0.75},
    }
    # A window missing on either side is not compared.
    assert cpu_ratios(summary, {"1": {}}) == {}


def test_with_more_pairs_the_verdict_is_the_median_of_their_ratios() -> None:
    summary = summarise(json.loads(BASELINE_REPORT.read_text()), "fe3526f")
    # 2 processes, baseline 113.3: pair 1 0.79; then 0.65 and 0.74 (a slower machine on both sides).
    summary["more_pairs"] = {
        "2": [
            {"pair": 2, "first": "baseline", "now_ms": 84.5, "baseline_ms": 130.0},
            {"pair": 3, "first": "orderflow", "now_ms": 74.0, "baseline_ms": 100.0},
            # A pair whose baseline side failed, and one whose baseline measured nothing: left out.
            {"pair": 4, "first": "baseline", "now_ms": 20.0},
            {"pair": 5, "first": "orderflow", "now_ms": 20.0, "baseline_ms": 0.0},
        ]
    }
    ratios = cpu_ratios(summary, {"1": _now(60.0), "2": _now(90.0)})
    assert ratios["2"] == {
        "baseline_ms": 113.3,
        "now_ms": 84.5,
        "ratio": 0.74,
        "target": 0.75,
        "met": True,
        "pairs": {"1": 0.79, "2": 0.65, "3": 0.74},
    }
    # A count without more pairs keeps its one pair.
    assert ratios["1"]["pairs"] == {"1": 0.57}
    # An even number of pairs: the median is the mean of the middle two ratios.
    summary["more_pairs"] = {"2": [{"pair": 2, "now_ms": 58.5, "baseline_ms": 130.0}]}
    assert cpu_ratios(summary, {"2": _now(60.0)})["2"]["ratio"] == round((60.0 / 113.3 + 0.45) / 2, 2)
    # Without pair 1 on both sides the count is not compared, whatever came after.
    assert cpu_ratios(summary, {"1": _now(60.0)}).keys() == {"1"}


def test_the_report_prints_the_comparison_beside_the_tables() -> None:
    summary = summarise(json.loads(BASELINE_REPORT.read_text()), "fe3526f")
    report = build_report(
        BenchConfig(orders=10),
        machine={"cpu_count": 2},
        orderflow_runs={"2": _now(56.0)},
        per_order=None,
        sweep_results=[],
        sweep_growth={},
        hard_down=None,
        peers={},
        baseline=summary,
        generated_at=datetime(2026, 12, 1, tzinfo=UTC),
    )
    assert report["baseline"]["cpu_ratio"]["2"]["ratio"] == 0.49
    text = markdown_tables(report)
    assert "fe3526f (the baseline, measured in this run) and now, medians of the pairs" in text
    assert "| 2 | 113.3 | 56 | 0.49 (met) | 1: 0.49 | 4.87 | 16 |" in text
    assert "|---|---:|---:|---:|---:|---:|---:|" in text


def test_the_machine_s_core_speed_is_reported_before_and_after_the_run() -> None:
    first, second = core_speed(repeats=1), core_speed(repeats=1)
    assert 0 < first < 60 and 0 < second < 60
    machine = machine_info((0.5, 0.4, 0.3), (1.0, 0.9, 0.8), (0.15, 0.2))
    assert machine["core_speed_s"] == {"loop": 2_000_000, "before_after": [0.15, 0.2]}
    report = build_report(
        BenchConfig(orders=10),
        machine=machine,
        orderflow_runs={},
        per_order=None,
        sweep_results=[],
        sweep_growth={},
        hard_down=None,
        peers={},
    )
    assert "took 0.15 s of CPU before the run and 0.2 s after it" in markdown_tables(report)


def test_a_baseline_without_a_window_asked_for_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def one_window(**_: object) -> dict[str, object]:
        return {"revision": "fe3526f", "windows": {"1": {}}, "exit_code": 1, "failed": ["FAILED: 2 died"]}

    monkeypatch.setattr(cpu_pairs, "baseline_run", one_window)
    parts = Parts(lambda _: None)
    notes: list[str] = []
    measured = cpu_pairs.measure_baseline(BenchConfig(orders=10, processes=(1, 2, 3)), tmp_path, parts, notes)
    assert measured is not None and measured["windows"] == {"1": {}}
    assert notes == []
    [failed] = parts.failed
    assert failed.startswith("FAILED: baseline 74cd56a: no 2-process window (FAILED: 2 died; see ")


def test_a_clone_without_the_baseline_notes_it_and_does_not_fail(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def unavailable(**_: object) -> dict[str, object]:
        raise BaselineUnavailable("git rev-parse: unknown revision")

    monkeypatch.setattr(cpu_pairs, "baseline_run", unavailable)
    said: list[str] = []
    parts = Parts(said.append)
    notes: list[str] = []
    assert cpu_pairs.measure_baseline(BenchConfig(orders=10), tmp_path, parts, notes) is None
    assert notes == ["baseline 74cd56a not measured: git rev-parse: unknown revision"]
    # Said as it happens too, not only kept for the report.
    assert said[-1] == notes[0]
    assert parts.failed == []


def test_a_process_count_whose_run_writes_no_report_leaves_only_its_window_out(
    repo: Path, tmp_path: Path
) -> None:
    stand_in = STAND_IN.replace(
        'report = args[args.index("--report") + 1]',
        'report = args[args.index("--report") + 1]\n'
        'if args[args.index("--processes") + 1] == "2": sys.exit(4)',
    )
    (repo / "bench" / "__main__.py").write_text(stand_in)
    _commit_all(repo, "2 fails")
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    summary = _one_order(repo, run_dir, "HEAD", processes=(1, 2))

    assert sorted(summary["windows"]) == ["1"]
    assert summary["exit_code"] == 1  # the first run's code that was not 0
    assert not (run_dir / "baseline-report-2.json").exists()
    assert (run_dir / "baseline-2.log").exists()
    assert _git(repo, "worktree", "list").count("\n") == 0


def _pair_fakes(calls: list[tuple[str, int, Path]]) -> tuple[Any, Any]:
    """A baseline run and an orderflow window that record their calls and measure 100 + n and 50 + n ms
    (n: the calls so far)."""

    def baseline_window(*, processes: tuple[int, ...], run_dir: Path, **_: object) -> dict[str, object]:
        (count,) = processes
        calls.append(("baseline", count, run_dir))
        window = {"cpu_ms_per_order": {"orderflow": 100.0 + len(calls)}, "outcomes": {"Processed": 3}}
        return {"revision": "fe3526f", "windows": {str(count): window}, "exit_code": 0, "failed": []}

    def now_window(count: int, logs: Path) -> dict[str, Any]:
        calls.append(("orderflow", count, logs))
        measured = {"cpu_ms_per_order": {"orderflow": 50.0 + len(calls)}}
        return {"measured": measured, "outcomes": {"Processed": 3}, "recovered_orders": 0}

    return baseline_window, now_window


def test_more_pairs_alternate_which_side_runs_first_and_keep_their_logs_apart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[str, int, Path]] = []
    baseline_window, now_window = _pair_fakes(calls)
    monkeypatch.setattr(cpu_pairs, "baseline_run", baseline_window)
    parts = Parts(lambda _: None)
    config = BenchConfig(orders=10, processes=(1, 2, 3), cpu_pairs=3)

    pairs = cpu_pairs.more_cpu_pairs(config, (1, 2), tmp_path, parts, now_window=now_window)

    # Pair 2 runs the baseline first, pair 3 orderflow first; each count's logs in a folder of its own.
    assert [(side, count, str(logs.relative_to(tmp_path))) for side, count, logs in calls] == [
        ("baseline", 1, "cpu-pair-2/p1"),
        ("orderflow", 1, "cpu-pair-2/p1"),
        ("baseline", 2, "cpu-pair-2/p2"),
        ("orderflow", 2, "cpu-pair-2/p2"),
        ("orderflow", 1, "cpu-pair-3/p1"),
        ("baseline", 1, "cpu-pair-3/p1"),
        ("orderflow", 2, "cpu-pair-3/p2"),
        ("baseline", 2, "cpu-pair-3/p2"),
    ]
    assert all(logs.is_dir() for _, _, logs in calls)
    processed = {"outcomes": {"Processed": 3}}
    assert pairs["1"] == [
        {
            "pair": 2,
            "first": "baseline",
            "baseline_ms": 101.0,
            "now_ms": 52.0,
            "baseline": processed,
            "orderflow": {**processed, "recovered_orders": 0},
        },
        {
            "pair": 3,
            "first": "orderflow",
            "now_ms": 55.0,
            "baseline_ms": 106.0,
            "orderflow": {**processed, "recovered_orders": 0},
            "baseline": processed,
        },
    ]
    assert parts.failed == []


def test_the_baseline_s_logs_of_every_pair_and_count_outlive_their_checkouts(
    monkeypatch: pytest.MonkeyPatch, repo: Path, tmp_path: Path
) -> None:
    monkeypatch.setattr(cpu_pairs, "baseline_run", partial(baseline_run, repo=repo))
    _, now_window = _pair_fakes([])
    parts = Parts(lambda _: None)
    config = BenchConfig(orders=1, warmup=0, processes=(1, 2), cpu_pairs=2, baseline="HEAD")

    pairs = cpu_pairs.more_cpu_pairs(config, (1, 2), tmp_path, parts, now_window=now_window)

    assert [pair["baseline_ms"] for count in ("1", "2") for pair in pairs[count]] == [100.0, 200.0]
    for count in (1, 2):
        logs = tmp_path / "cpu-pair-2" / f"p{count}"
        assert (logs / "baseline-run" / "bench-1" / "devhost-1.log").read_text() == "its log"
        assert (logs / f"baseline-{count}.log").exists()
    assert _git(repo, "worktree", "list").count("\n") == 0
    assert parts.failed == []


def test_a_side_that_fails_keeps_the_other_s_outcomes_and_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_window(**_: object) -> dict[str, object]:
        return {"revision": "fe3526f", "windows": {}, "exit_code": 1, "failed": []}

    def now_window(count: int, logs: Path) -> dict[str, Any]:
        measured = {"cpu_ms_per_order": {"orderflow": 50.0}}
        return {"measured": measured, "outcomes": {"Processed": 3, "Error": 1}, "recovered_orders": 1}

    monkeypatch.setattr(cpu_pairs, "baseline_run", no_window)
    parts = Parts(lambda _: None)
    config = BenchConfig(orders=10, processes=(2,), cpu_pairs=3)

    pairs = cpu_pairs.more_cpu_pairs(config, (2,), tmp_path, parts, now_window=now_window)

    # Pair 2 ran the baseline first and stopped there; pair 3 ran orderflow, then the baseline failed.
    assert pairs == {
        "2": [
            {"pair": 2, "first": "baseline"},
            {
                "pair": 3,
                "first": "orderflow",
                "now_ms": 50.0,
                "orderflow": {"outcomes": {"Processed": 3, "Error": 1}, "recovered_orders": 1},
            },
        ]
    }
    assert [failed.split(":")[1] for failed in parts.failed] == [
        " CPU pair 2 of 3 on 2 devhost process(es)",
        " CPU pair 3 of 3 on 2 devhost process(es)",
    ]
    assert (
        f"no 2-process window (exit code 1; see {tmp_path}/cpu-pair-2/p2/baseline-2.log)" in parts.failed[0]
    )
    # The orders orderflow did not process still fail the run, beside the baseline's failure.
    assert failures({"notes": [], "baseline": {"more_pairs": pairs}}) == [
        "FAILED: baseline.more_pairs.2.1.orderflow: orders not Processed: {'Processed': 3, 'Error': 1}"
    ]


def test_more_pairs_run_only_on_counts_whose_first_pair_has_both_windows() -> None:
    config = BenchConfig(orders=10, processes=(1, 2, 3), cpu_pairs=3)
    both: dict[str, Any] = {"windows": {"1": {}, "2": {}, "3": {}}}
    assert cpu_pairs.paired_counts(config, {"1": {}, "2": {}, "3": {}}, both) == (1, 2)
    assert cpu_pairs.paired_counts(config, {"2": {}}, both) == (2,)
    assert cpu_pairs.paired_counts(config, {"1": {}, "2": {}}, {"windows": {"1": {}}}) == (1,)
