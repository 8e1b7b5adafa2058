"""Wake-ups across devhost processes (devhost.wakeup_channel) and the loops they wake (devhost.loops)."""

from __future__ import annotations

import hashlib
import itertools
import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from devhost.loops import PeriodicLoop, Wakeups
from devhost.wakeup_channel import (
    ADDRESS_PREFIX,
    WakeupChannel,
    WakeupSocketInUse,
    read_address,
    sender_uid,
)

pytestmark = pytest.mark.unit


def _until(predicate: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.005)
    return False


def test_a_queue_name_announced_by_one_process_reaches_the_others(tmp_path: Path) -> None:
    heard: dict[str, list[str]] = {"b": [], "c": []}
    a = WakeupChannel(tmp_path, "a", lambda name: None)
    b = WakeupChannel(tmp_path, "b", heard["b"].append)
    c = WakeupChannel(tmp_path, "c", heard["c"].append)
    for channel in (a, b, c):
        channel.start()
    try:
        assert a.announce("agent-x-payments") == 2
        assert _until(lambda: heard["b"] == ["agent-x-payments"] and heard["c"] == ["agent-x-payments"])
    finally:
        for channel in (a, b, c):
            channel.stop()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_socket_left_by_a_killed_process_is_forgotten(tmp_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(tmp_path / "gone.sock"))
    stale.close()  # the file stays, as after a SIGKILL
    a = WakeupChannel(tmp_path, "a", lambda name: None)
    a.start()
    try:
        assert a.announce("q1") == 0
        assert a._current_peers() == []  # forgotten until the next scan of the directory
    finally:
        a.stop()


def test_a_restarted_process_replaces_its_stale_socket(tmp_path: Path) -> None:
    heard: list[str] = []
    first = WakeupChannel(tmp_path, "b", lambda name: None)
    first.start()
    killed, first._socket = first._socket, None
    assert killed is not None
    # Killed: the kernel frees its socket (shutdown ends the reader's recv, which holds it), its file stays.
    killed.shutdown(socket.SHUT_RDWR)
    killed.close()
    first._thread.join(timeout=5)
    again = WakeupChannel(tmp_path, "b", heard.append)
    again.start()
    a = WakeupChannel(tmp_path, "a", lambda name: None)
    a.start()
    try:
        assert a.announce("q2") == 1
        assert _until(lambda: heard == ["q2"])
    finally:
        a.stop()
        again.stop()


def test_a_directory_deeper_than_a_socket_path_may_be_works(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*(["a-run-folder-of-some-length"] * 6))
    assert len(str(deep / "devhost-1.sock").encode()) > 108
    heard: list[str] = []
    a = WakeupChannel(deep, "devhost-1", lambda name: None)
    b = WakeupChannel(deep, "devhost-2", heard.append)
    for channel in (a, b):
        channel.start()
    try:
        assert a.announce("orders-a") == 1
        assert _until(lambda: heard == ["orders-a"])
    finally:
        for channel in (a, b):
            channel.stop()


def test_notify_wakes_here_and_announces_wake_only_sets_known_events() -> None:
    announced: list[str] = []
    wakeups = Wakeups(announce=announced.append)
    event = wakeups.event("q1")
    wakeups.notify("q1")
    assert event.is_set() and announced == ["q1"]
    event.clear()
    wakeups.wake("q1")
    wakeups.wake("unknown")
    assert event.is_set() and announced == ["q1"]
    assert wakeups._events.keys() == {"q1"}


def test_a_periodic_loop_runs_early_when_woken_but_not_more_often_than_its_minimum() -> None:
    runs: list[float] = []
    stop, wakeup = threading.Event(), threading.Event()
    loop = PeriodicLoop(
        "starter",
        lambda: runs.append(time.monotonic()),
        stop,
        interval_s=30,
        wakeup=wakeup,
        min_interval_s=0.2,
    )
    loop.start()
    try:
        assert _until(lambda: len(runs) == 1)
        wakeup.set()
        assert _until(lambda: len(runs) == 2, timeout_s=2)
        for _ in range(20):  # a burst of wake-ups
            wakeup.set()
            time.sleep(0.01)
        assert _until(lambda: len(runs) >= 3, timeout_s=2)
    finally:
        stop.set()
        wakeup.set()
        loop.join()
    gaps = [later - earlier for earlier, later in itertools.pairwise(runs)]
    assert all(gap >= 0.19 for gap in gaps), gaps
    assert len(runs) <= 4  # 30 s interval: every run but the first was a wake-up, bunched


def test_a_second_channel_of_a_live_host_id_is_refused_and_leaves_the_first_alone(tmp_path: Path) -> None:
    heard: list[str] = []
    first = WakeupChannel(tmp_path, "b", heard.append)
    first.start()
    second = WakeupChannel(tmp_path, "b", lambda name: None)
    try:
        with pytest.raises(WakeupSocketInUse, match="bound by another live process"):
            second.start()
        second.stop()  # what a failed start-up's clean-up does: nothing of the first's is removed
        assert (tmp_path / "b.sock").exists()
        other = WakeupChannel(tmp_path, "a", lambda name: None)
        other.start()
        try:
            assert other.announce("q1") == 1
            assert _until(lambda: heard == ["q1"])  # the first still listens on its own socket
        finally:
            other.stop()
    finally:
        first.stop()


def test_a_link_planted_at_the_socket_file_is_replaced_and_creates_nothing_where_it_points(
    tmp_path: Path,
) -> None:
    shared, elsewhere = tmp_path / "wakeups", tmp_path / "elsewhere"
    shared.mkdir()
    elsewhere.mkdir()
    (shared / "a.sock").symlink_to(elsewhere / "victim")  # a file the host's user may write
    (shared / "b.sock").symlink_to(tmp_path / "missing" / "victim")  # where nothing can be made
    a = WakeupChannel(shared, "a", lambda name: None)
    b = WakeupChannel(shared, "b", lambda name: None)
    for channel in (a, b):
        channel.start()
    try:
        assert list(elsewhere.iterdir()) == []
        for name in ("a.sock", "b.sock"):
            assert (shared / name).is_file() and not (shared / name).is_symlink()
    finally:
        for channel in (a, b):
            channel.stop()


def test_a_start_that_cannot_write_its_file_leaves_its_socket_unbound(tmp_path: Path) -> None:
    (tmp_path / "a.sock").mkdir()
    (tmp_path / "a.sock" / "x").touch()  # not a file this process may replace
    with pytest.raises(OSError):
        WakeupChannel(tmp_path, "a", lambda name: None).start()
    (tmp_path / "a.sock" / "x").unlink()
    (tmp_path / "a.sock").rmdir()
    again = WakeupChannel(tmp_path, "a", lambda name: None)
    again.start()  # not WakeupSocketInUse: the failed start bound nothing that outlived it
    again.stop()


def test_an_address_another_user_bound_first_cannot_keep_a_host_from_starting(tmp_path: Path) -> None:
    # The address a name derived from the file's path would give: anyone could bind it before the host.
    digest = hashlib.sha256(os.fsencode((tmp_path / "b.sock").absolute())).hexdigest()[:40]
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    squatter.bind(f"{ADDRESS_PREFIX}{digest}")
    heard: list[str] = []
    b = WakeupChannel(tmp_path, "b", heard.append)
    a = WakeupChannel(tmp_path, "a", lambda name: None)
    try:
        b.start()
        a.start()
        assert a.announce("q1") == 1
        assert _until(lambda: heard == ["q1"])
        first = read_address(tmp_path / "b.sock")
        assert first is not None and first != f"{ADDRESS_PREFIX}{digest}"
        # Readable by this user only: the address is not handed to others.
        assert stat.S_IMODE((tmp_path / "b.sock").stat().st_mode) == 0o600
    finally:
        a.stop()
        b.stop()
        squatter.close()
    again = WakeupChannel(tmp_path, "b", lambda name: None)
    again.start()
    try:
        assert read_address(tmp_path / "b.sock") not in (None, first)  # a new address each start
    finally:
        again.stop()


def test_a_file_that_names_no_wake_up_address_is_no_peer(tmp_path: Path) -> None:
    (tmp_path / "junk.sock").write_text("not an address")
    (tmp_path / "empty.sock").write_text("")
    a = WakeupChannel(tmp_path, "a", lambda name: None)
    a.start()
    try:
        assert a._current_peers() == []
        assert a.announce("q1") == 0
    finally:
        a.stop()


def test_the_sender_uid_is_read_from_its_credentials() -> None:
    credentials = (socket.SOL_SOCKET, socket.SCM_CREDENTIALS, (4242).to_bytes(4, sys.byteorder) * 3)
    assert sender_uid([credentials]) == 4242
    assert sender_uid([]) is None
    assert sender_uid([(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, b"\0\0")]) is None  # cut short


def _send_as(uid: int, address: str, data: bytes) -> None:
    """Send ``data`` to ``address`` from a child process running as ``uid`` (the interpreter of a venv
    under /root is not another user's to start, so the child is forked)."""
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then out without running any clean-up
        code = 1
        try:
            if uid != os.getuid():
                os.setgid(uid)
                os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
                out.sendto(data, address)
            code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="sending as another user needs root")
def test_a_datagram_from_another_user_wakes_nothing(tmp_path: Path) -> None:
    heard: list[str] = []
    b = WakeupChannel(tmp_path, "b", heard.append)
    b.start()
    try:
        address = read_address(tmp_path / "b.sock")
        assert address is not None
        _send_as(65534, address, b"from-nobody")
        _send_as(os.getuid(), address, b"from-this-user")
        assert _until(lambda: heard == ["from-this-user"])
        time.sleep(0.05)
        assert heard == ["from-this-user"]  # the other user's datagram was dropped, not late
    finally:
        b.stop()
