"""A host id is held by one live process per storage endpoint (devhost.host_lock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devhost.__main__ import LOCK_DIR_ENV, hold_host_id
from devhost.emulators import REPO_ROOT
from devhost.host_lock import HostIdInUse, acquire_host_id, lock_name
from devhost.queues.factory import queue_service_url
from orderflow.settings import Settings

pytestmark = pytest.mark.unit

AZURITE = "http://127.0.0.1:10001/devstoreaccount1"
OTHER_AZURITE = "http://127.0.0.1:20001/devstoreaccount1"


def connection_string(queue_endpoint: str) -> str:
    account = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5"
    return f"{account};QueueEndpoint={queue_endpoint}"


def test_a_second_holder_is_refused_with_the_first_ones_pid_until_it_releases(tmp_path: Path) -> None:
    held = acquire_host_id("demo-1", AZURITE, directory=tmp_path)
    with pytest.raises(HostIdInUse) as refused:
        acquire_host_id("demo-1", AZURITE, directory=tmp_path)
    assert refused.value.holder == os.getpid()
    assert f"host id 'demo-1' is in use by process {os.getpid()} on this machine against {AZURITE}" in str(
        refused.value
    )
    assert "\n" not in str(refused.value)
    held.release()
    held.release()  # idempotent
    again = acquire_host_id("demo-1", AZURITE, directory=tmp_path)
    again.release()


def test_the_same_host_id_against_another_endpoint_or_another_host_id_is_not_blocked(tmp_path: Path) -> None:
    held = [
        acquire_host_id("demo-1", AZURITE, directory=tmp_path),
        acquire_host_id("demo-1", OTHER_AZURITE, directory=tmp_path),
        acquire_host_id("demo-2", AZURITE, directory=tmp_path),
    ]
    assert len({lock.path for lock in held}) == 3
    assert lock_name("demo-1", AZURITE) == lock_name("demo-1", AZURITE + "/")
    for lock in held:
        lock.release()


@pytest.mark.parametrize(
    "spelling",
    [
        "http://localhost:10001/devstoreaccount1",
        "http://127.1:10001/devstoreaccount1",
        "http://[::1]:10001/devstoreaccount1",
        "HTTP://127.0.0.1:10001/devstoreaccount1/",
        " http://127.0.0.2:10001/devstoreaccount1",
    ],
)
def test_every_spelling_of_one_endpoint_is_one_lock(tmp_path: Path, spelling: str) -> None:
    held = acquire_host_id("demo-1", AZURITE, directory=tmp_path)
    try:
        with pytest.raises(HostIdInUse):
            acquire_host_id("demo-1", spelling, directory=tmp_path)
    finally:
        held.release()


def test_another_port_account_or_scheme_is_another_endpoint() -> None:
    names = {
        lock_name("demo-1", endpoint)
        for endpoint in (
            AZURITE,
            "http://127.0.0.1:10002/devstoreaccount1",
            "http://127.0.0.1:10001/otheraccount",
            "https://127.0.0.1:10001/devstoreaccount1",
        )
    }
    assert len(names) == 4


def test_a_link_planted_at_the_locks_name_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("kept\n")
    (tmp_path / lock_name("demo-1", AZURITE)).symlink_to(target)
    with pytest.raises(OSError):
        acquire_host_id("demo-1", AZURITE, directory=tmp_path)
    assert target.read_text() == "kept\n"


def test_the_endpoint_is_the_queue_service_of_the_connection_string() -> None:
    assert queue_service_url(connection_string(AZURITE)).rstrip("/") == AZURITE
    account = (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net"
    )
    assert queue_service_url(account).rstrip("/") == "https://acct.queue.core.windows.net"


def test_a_devhost_takes_its_host_id_against_its_storage_endpoint_in_the_lock_directory(
    tmp_path: Path,
) -> None:
    settings = Settings.load({}, HOST_ID="demo-1", STORAGE_CONNECTION_STRING=connection_string(AZURITE))
    held = hold_host_id(settings, {LOCK_DIR_ENV: str(tmp_path)})
    try:
        assert held.path == tmp_path / lock_name("demo-1", AZURITE)
        assert held.path.read_text() == f"{os.getpid()}\n"
        other = settings.replace(**{"STORAGE_CONNECTION_STRING": connection_string(OTHER_AZURITE)})
        hold_host_id(other, {LOCK_DIR_ENV: str(tmp_path)}).release()  # another emulator: not blocked
        with pytest.raises(HostIdInUse):
            hold_host_id(settings, {LOCK_DIR_ENV: str(tmp_path)})
    finally:
        held.release()


HOLDER = """
import sys, time
from pathlib import Path
from devhost.emulators import REPO_ROOT
from devhost.host_lock import acquire_host_id
acquire_host_id("demo-1", sys.argv[1], directory=Path(sys.argv[2]))
print("held", flush=True)
time.sleep(120)
"""


def test_a_holder_killed_with_sigkill_releases_the_host_id_at_once(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, AZURITE, str(tmp_path)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(HostIdInUse) as refused:
            acquire_host_id("demo-1", AZURITE, directory=tmp_path)
        assert refused.value.holder == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    started = time.monotonic()
    acquire_host_id("demo-1", AZURITE, directory=tmp_path).release()
    assert time.monotonic() - started < 0.5
