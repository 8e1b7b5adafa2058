"""The benchmark's measurements: request classification, the HTTP and gRPC counters, CPU counters, the
window's per-order figures, the profile summary and the probe's snapshots."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import requests
import requests.adapters
from azure.core.pipeline.transport import HttpRequest

from bench.counting import OperationCounts
from bench.counting.cpu import (
    CpuClock,
    child_pids,
    cpu_between,
    parse_machine_stat,
    parse_peak_rss_kb,
    parse_stat,
    peak_rss_mb,
    process_cpu_s,
)
from bench.counting.grpc_calls import GRPC, CountingInterceptor, method_name
from bench.counting.http import OTHER, HttpCounter, classify, install_http_counter, target_of
from bench.measure import (
    BACKEND_SUFFIX,
    DEVHOSTS_ONLY,
    counts_between,
    http_targets,
    limited_by,
    per_order_by_target,
    window_figures,
)
from bench.probe import SNAPSHOT_SIGNAL, Probe, read_counts
from bench.profiling import package_of, parse_stacks, summarise_stacks
from bench.report import cost_rows, profile_tables
from devhost.emulators import LocalEndpoints, azurite_connection_string
from devhost.http_transport import LoopbackTransport

pytestmark = pytest.mark.unit

Q = "http://127.0.0.1:10001/devstoreaccount1"
C = "https://127.0.0.1:8081"


@pytest.mark.parametrize(
    ("method", "url", "headers", "operation"),
    [
        ("POST", f"{Q}/agent-x-payments/messages?timeout=5", {}, "send"),
        ("GET", f"{Q}/agent-x-payments/messages?numofmessages=32&visibilitytimeout=30", {}, "receive"),
        ("GET", f"{Q}/q1/messages?peekonly=true&numofmessages=32", {}, "peek"),
        ("DELETE", f"{Q}/q1/messages/abc-123?popreceipt=xyz", {}, "delete"),
        ("PUT", f"{Q}/q1/messages/abc-123?popreceipt=xyz&visibilitytimeout=60", {}, "update"),
        ("PUT", f"{Q}/q1", {}, "create_queue"),
        ("GET", f"{Q}/q1?comp=metadata", {}, "queue_metadata"),
        ("DELETE", f"{Q}/q1/messages", {}, "clear"),
        ("PUT", "http://127.0.0.1:10000/devstoreaccount1/leases/bench-x?comp=lease", {}, "lease"),
        ("PUT", "http://127.0.0.1:10000/devstoreaccount1/leases?restype=container", {}, "blob"),
        ("GET", f"{C}/dbs/benchx/colls/orderstate/docs/c1%3Ao1", {}, "read"),
        ("PUT", f"{C}/dbs/benchx/colls/orderstate/docs/c1%3Ao1", {}, "replace"),
        ("DELETE", f"{C}/dbs/benchx/colls/orderstate/docs/c1%3Ao1", {}, "delete"),
        ("POST", f"{C}/dbs/benchx/colls/orderstate/docs", {}, "create"),
        ("POST", f"{C}/dbs/benchx/colls/orderstate/docs", {"X-Ms-DocumentDB-IsQuery": "True"}, "query"),
        ("GET", f"{C}/dbs/benchx/colls/orderstate/pkranges", {}, "metadata"),
        ("GET", f"{C}/", {}, "metadata"),
    ],
)
def test_each_emulator_request_is_named_by_its_operation(
    method: str, url: str, headers: dict[str, str], operation: str
) -> None:
    assert classify(method, url, headers) == operation


def test_a_request_is_counted_under_the_emulator_its_address_names() -> None:
    targets = {"127.0.0.1:10001": "azurite", "127.0.0.1:8081": "cosmosdb-server"}
    assert target_of(f"{Q}/q1/messages", targets) == "azurite"
    assert target_of(f"{C}/dbs/x", targets) == "cosmosdb-server"
    assert target_of("http://127.0.0.1:9999/x", targets) == OTHER


def test_the_run_targets_come_from_the_endpoints() -> None:
    endpoints = LocalEndpoints(azurite_connection_string(10000, 10001), "https://127.0.0.1:8081/")
    assert http_targets(endpoints, "http://127.0.0.1:8500") == {
        "127.0.0.1:10000": "azurite",
        "127.0.0.1:10001": "azurite",
        "127.0.0.1:8081": "cosmosdb-server",
        "127.0.0.1:8500": "demo-services",
    }


def test_the_http_counter_counts_each_request_sent_through_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []

    def fake_send(_adapter: Any, request: Any, *_args: Any, **_kwargs: Any) -> requests.Response:
        sent.append(request.method)
        response = requests.Response()
        response.status_code = 201
        return response

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", fake_send)
    counter = HttpCounter({"127.0.0.1:10001": "azurite"})
    uninstall = install_http_counter(counter)
    with requests.Session() as session:
        session.post(f"{Q}/q1/messages", data="<x/>")
        session.post(f"{Q}/q1/messages", data="<x/>")
        session.get(f"{Q}/q1/messages?numofmessages=1")
    uninstall()
    with requests.Session() as session:
        session.get(f"{Q}/q1/messages")  # no longer counted
    assert sent == ["POST", "POST", "GET", "GET"]
    assert counter.counts.snapshot() == {"receive": {"azurite": 1}, "send": {"azurite": 2}}


def test_the_http_counter_counts_each_request_of_the_loopback_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[str] = []

    def fake_send(_transport: Any, request: Any, **_kwargs: Any) -> str:
        sent.append(request.method)
        return "answer"

    monkeypatch.setattr(LoopbackTransport, "send", fake_send)
    counter = HttpCounter({"127.0.0.1:10001": "azurite"})
    transport = LoopbackTransport()
    uninstall = install_http_counter(counter)
    answer: object = transport.send(HttpRequest("DELETE", f"{Q}/q1/messages/m1?popreceipt=p"))
    assert answer == "answer"  # what the wrapped send returned
    transport.send(HttpRequest("GET", "http://127.0.0.1:9/elsewhere"))
    uninstall()
    transport.send(HttpRequest("POST", f"{Q}/q1/messages"))  # no longer counted
    assert sent == ["DELETE", "GET", "POST"]
    assert counter.counts.snapshot() == {"delete": {"azurite": 1}, OTHER: {OTHER: 1}}


def test_the_grpc_interceptor_counts_calls_by_method_and_continues() -> None:
    counts = OperationCounts()
    interceptor = CountingInterceptor(counts)

    class Details:
        method = "/TaskHubSidecarService/StartInstance"

    def continuation(details: Any, request: Any) -> str:
        return f"{details.method}:{request}"

    assert interceptor.intercept_unary_unary(continuation, Details(), "r1") == f"{Details.method}:r1"
    interceptor.intercept_unary_unary(continuation, Details(), "r2")
    interceptor.intercept_unary_stream(continuation, type("D", (), {"method": "/S/GetWorkItems"})(), "r")
    assert counts.snapshot() == {"GetWorkItems": {GRPC: 1}, "StartInstance": {GRPC: 2}}
    assert method_name("/a.B/RaiseEvent") == "RaiseEvent"
    assert method_name("Plain") == "Plain"


STAT = "4242 (node (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 730 120 15 3 20 0 11 0 999 1 1 1844674"


def test_proc_stat_fields_are_read_after_the_command_name() -> None:
    assert parse_stat(STAT) == (730, 120, 15, 3)
    with pytest.raises(ValueError, match="stat line"):
        parse_stat("no parentheses here")


def test_machine_busy_time_leaves_out_idle_and_iowait() -> None:
    text = "cpu  100 5 50 800 40 2 3 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n"
    assert parse_machine_stat(text) == (160, 1000)


def test_a_process_cpu_time_is_its_own_user_and_system_time(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_text(STAT)
    assert process_cpu_s(4242, proc=tmp_path, ticks=100) == pytest.approx(8.5)
    assert process_cpu_s(4343, proc=tmp_path, ticks=100) is None
    own = process_cpu_s(os.getpid())
    assert own is not None and own > 0


def test_a_process_peak_memory_is_its_vmhwm_and_this_process_has_one(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    status = "Name:\tpython\nVmPeak:\t  900000 kB\nVmHWM:\t  125000 kB\nVmRSS:\t  110000 kB\n"
    (tmp_path / "4242" / "status").write_text(status)
    assert parse_peak_rss_kb(status) == 125_000
    assert peak_rss_mb(4242, proc=tmp_path) == 128.0  # 125,000 KiB
    assert peak_rss_mb(4343, proc=tmp_path) is None  # gone
    assert parse_peak_rss_kb("Name:\tkthreadd\n") is None
    # The real /proc: the peak rises with what this process touches beyond what it holds now, and stays
    # after it is let go.
    status = Path(f"/proc/{os.getpid()}/status").read_text()
    (resident_kb,) = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")]
    held = bytearray(64 * 1024 * 1024)  # zeroed: every page touched
    del held
    after = peak_rss_mb(os.getpid())
    assert after is not None and after >= resident_kb * 1024 / 1e6 + 60


def test_child_pids_are_read_from_every_thread_of_the_process(tmp_path: Path) -> None:
    for tid, children in (("4242", "4300 4301 "), ("4250", "4302"), ("4251", "")):
        (tmp_path / "4242" / "task" / tid).mkdir(parents=True)
        (tmp_path / "4242" / "task" / tid / "children").write_text(children)
    assert child_pids(4242, proc=tmp_path) == [4300, 4301, 4302]
    assert child_pids(4343, proc=tmp_path) == []  # gone


def test_cpu_between_two_samples_of_the_processes_still_running() -> None:
    readings = iter([{1: 2.0, 2: 1.0}, {1: 2.75}])
    current: dict[int, float] = {}

    def sample(pid: int) -> float | None:
        return current.get(pid)

    clock = CpuClock({"a": 1, "b": 2}, sample=sample)
    current = next(readings)
    before = clock.sample()
    current = next(readings)
    after = clock.sample()
    assert before == {"a": 2.0, "b": 1.0}
    assert cpu_between(before, after) == {"a": 0.75}


def test_counts_between_two_snapshots_per_order_by_target() -> None:
    before = {"send": {"azurite": 10}, "read": {"cosmosdb-server": 4}}
    after = {"send": {"azurite": 28}, "read": {"cosmosdb-server": 4}, "receive": {"azurite": 3}}
    delta = counts_between(before, after)
    assert delta == {"send": {"azurite": 18}, "receive": {"azurite": 3}}
    other = {"send": {"azurite": 2}, "replace": {"cosmosdb-server": 10}}
    assert per_order_by_target([delta, other], 2) == {
        "azurite": {"receive": 1.5, "send": 10.0, "total": 11.5},
        "cosmosdb-server": {"replace": 5.0, "total": 5.0},
    }


def test_the_limit_is_the_machine_then_a_saturated_process_then_waiting() -> None:
    assert limited_by({"devhost-1": 1.0, "azurite": 0.6}, 1.9, 2) == (
        "the machine's CPU (1.90 of 2 cores busy, 0.30 of them outside the run; "
        "busiest: devhost-1 at 1.00 cores)"
    )
    assert limited_by({"devhost-1": 0.95, "azurite": 0.2}, 1.2, 2) == (
        "devhost-1's CPU (0.95 cores: one interpreter's worth)"
    )
    assert limited_by({"devhost-1": 0.3}, 0.5, 2) == (
        "waiting, not CPU (0.50 of 2 cores busy; busiest: devhost-1 at 0.30 cores)"
    )


def _snapshot(at: float, cpu: dict[str, float], busy: float, sends: int, grpc: int) -> dict[str, Any]:
    return {
        "peak_rss_mb": {"devhost-1": 100.0 + at},
        "at": at,
        "cpu_s": cpu,
        "machine_busy_s": busy,
        "counts": {
            "devhost-1": {"http": {"send": {"azurite": sends}}, "grpc": {"RaiseEvent": {GRPC: grpc}}},
            "load generator": {"http": {"receive": {"azurite": sends // 2}}, "grpc": {}},
        },
    }


def test_window_figures_per_order() -> None:
    before = _snapshot(100.0, {"devhost-1": 10.0, "azurite": 5.0}, 1000.0, 100, 30)
    after = _snapshot(110.0, {"devhost-1": 18.0, "azurite": 7.0}, 1012.0, 280, 90)
    figures = window_figures(before, after, orders=20, own=["devhost-1"], cpu_count=2)
    assert figures["elapsed_s"] == 10.0
    assert figures["cpu_ms_per_order"] == {
        "azurite": 100.0,
        "devhost-1": 400.0,
        "orderflow": 400.0,
        "all": 500.0,
    }
    assert figures["cores"] == {"azurite": 0.2, "devhost-1": 0.8, "machine": 1.2, "unmeasured": 0.2}
    assert figures["http_per_order"] == {"azurite": {"receive": 4.5, "send": 9.0, "total": 13.5}}
    assert figures["grpc_per_order"] == {"RaiseEvent": 3.0, "total": 3.0}
    assert figures["limited_by"].startswith("waiting, not CPU")
    assert figures["peak_rss_mb"] == {"devhost-1": 210.0}  # the peak at the window's end
    with pytest.raises(ValueError, match="positive"):
        window_figures(before, after, orders=0, own=[])


def test_with_backends_among_its_processes_orderflow_is_also_counted_without_them() -> None:
    backend = f"devhost-1 {BACKEND_SUFFIX}"
    before = _snapshot(100.0, {"devhost-1": 10.0, backend: 2.0, "azurite": 5.0}, 1000.0, 100, 30)
    after = _snapshot(110.0, {"devhost-1": 16.0, backend: 4.0, "azurite": 7.0}, 1012.0, 280, 90)
    figures = window_figures(before, after, orders=20, own=["devhost-1", backend], cpu_count=2)
    assert figures["cpu_ms_per_order"] == {
        "azurite": 100.0,
        "devhost-1": 300.0,
        backend: 100.0,
        "orderflow": 400.0,
        DEVHOSTS_ONLY: 300.0,
        "all": 500.0,
    }


REPO = "/work/repo"
RAW = (
    "Thread.run (/usr/lib/python3.11/threading.py:982);send (/v/lib/python3.11/site-packages/urllib3/"
    "connectionpool.py:700);recv_into (/usr/lib/python3.11/socket.py:706) 6\n"
    "Thread.run (/usr/lib/python3.11/threading.py:982);claim (/work/repo/orchestrators/starter.py:50) 3\n"
    "Thread.run (/usr/lib/python3.11/threading.py:982) 1\n"
    "garbage line\n"
)


def test_frames_belong_to_site_packages_the_repository_or_the_standard_library() -> None:
    assert package_of("/v/lib/python3.11/site-packages/grpc/_channel.py", repo_root=REPO) == "grpc"
    assert package_of("/v/lib/python3.11/site-packages/six.py", repo_root=REPO) == "six"
    assert package_of("/work/repo/orderflow/records.py", repo_root=REPO) == "orderflow"
    assert package_of("/usr/lib/python3.11/json/decoder.py", repo_root=REPO) == "stdlib:decoder"


def test_a_profile_is_attributed_to_the_innermost_frame_outside_the_standard_library() -> None:
    assert len(parse_stacks(RAW)) == 3
    summary = summarise_stacks(RAW, repo_root=REPO)
    assert summary["samples"] == 10
    assert summary["by_package"] == {"urllib3": 0.6, "orchestrators": 0.3, "stdlib:threading": 0.1}
    assert summary["inclusive"] == {"urllib3": 0.6, "orchestrators": 0.3, "stdlib:threading": 1.0}
    assert summary["top_functions"]["recv_into (stdlib:socket)"] == 0.6


def test_the_probe_writes_its_counts_when_signalled(tmp_path: Path) -> None:
    probe = Probe(tmp_path / "counts.json", {"127.0.0.1:10001": "azurite"})
    probe.http.count("POST", f"{Q}/q1/messages", {})
    probe.grpc.add("StartInstance", GRPC)
    probe.write()
    previous = signal.signal(SNAPSHOT_SIGNAL, probe.on_signal)
    try:
        probe.http.count("DELETE", f"{Q}/q1/messages/m1?popreceipt=p", {})
        data = read_counts(os.getpid(), probe.path, timeout_s=5)
    finally:
        signal.signal(SNAPSHOT_SIGNAL, previous)
    assert data == {
        "seq": 2,
        "http": {"delete": {"azurite": 1}, "send": {"azurite": 1}},
        "grpc": {"StartInstance": {GRPC: 1}},
    }


def test_the_cost_table_has_a_column_per_measured_run() -> None:
    measured = {
        "cpu_ms_per_order": {"devhost-1": 40.0, "orderflow": 40.0, "azurite": 10.0, "all": 50.0},
        "http_per_order": {"azurite": {"send": 9.0, "total": 9.0}},
        "grpc_per_order": {"StartInstance": 1.0, "total": 1.0},
        "limited_by": "waiting",
        "profiles": [
            {
                "process": "devhost-1",
                "roles": "scheduler",
                "samples": 10,
                "by_package": {"grpc": 0.5},
                "inclusive": {"grpc": 0.7},
            },
            {
                "process": "devhost-2",
                "roles": "submission,agents",
                "samples": 4,
                "by_package": {"azure.storage.queue": 0.75, "httpx": 0.25},
                "inclusive": {"azure.storage.queue": 0.75},
            },
        ],
    }
    report = {"orderflow": {"runs": {"2": {"measured": measured}, "1": {}}, "one_at_a_time": {}}}
    header, rows = cost_rows(report)
    assert header == ["per order", "2 proc"]
    assert rows == [
        ["CPU ms: orderflow", "40"],
        ["CPU ms: devhost-1", "40"],
        ["CPU ms: azurite", "10"],
        ["CPU ms: all", "50"],
        ["requests: azurite send", "9"],
        ["requests: azurite total", "9"],
        ["gRPC: StartInstance", "1"],
        ["gRPC: total", "1"],
        ["limited by", "waiting"],
    ]
    assert profile_tables(report) == [
        ("py-spy profile of devhost-1 (scheduler; 2 proc), 10 busy samples", [["grpc", "50%", "70%"]]),
        (
            "py-spy profile of devhost-2 (submission,agents; 2 proc), 4 busy samples",
            [["azure.storage.queue", "75%", "75%"], ["httpx", "25%", "0%"]],
        ),
    ]
