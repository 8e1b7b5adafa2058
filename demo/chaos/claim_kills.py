"""Kills between the create and the claim: a devhost process SIGKILLed after its submission recorded a new
order and before that order was claimed.

The submission sends the client's ``Received`` reply after it created the order's state record and
before it claims the record (:mod:`intake.submission`, :mod:`intake.claim_on_submit`). For a drawn share of
new orders, :class:`KillPoint` (in the devhost process, at its queue seam) holds the submission's thread
right after that send and asks the driver, through a marker file, to kill the process; :class:`ClaimKiller`
(in the driver) SIGKILLs and restarts it, as :class:`demo.fleet.Killer` does. The record is left
``Pending`` and unlocked, the message uncompleted: the redelivery finds the order recorded and claims
nothing, and a starter's sweep must start it. Each order is killed for at most once (the marker is made
with ``O_EXCL``), so a redelivery or a duplicate of the reply goes through.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from demo.fleet import RESTART_RETRY_S, Fleet
from orderflow.messages import OrderStatus

logger = logging.getLogger(__name__)

MARKERS = "claim-kills"
"""The folder, under the run's delivery-fault logs, of the processes' requests to be killed."""

HOLD_S = 20.0
"""Seconds a process holds its submission for the kill before it goes on (the driver may find it paused,
or be stopping): a request older than this is dropped by the driver, not acted on late."""

POLL_S = 0.05
"""Seconds between the driver's looks at the requests."""

RECEIVED_SUFFIX = f":{OrderStatus.RECEIVED.value}"
"""The end of a ``Received`` reply's message id (:func:`orderflow.messages.reply_message_id`)."""


class KillPoint:
    """In a devhost process: after the ``Received`` reply of a drawn new order, be killed.

    Args:
        reply_queues: The registered clients' reply queues.
        drawn: Whether the reply ``(queue, message id)`` is one whose process is killed (deterministic).
        markers: The folder of the kill requests.
        hold_s: Seconds to wait for the kill before going on.
    """

    def __init__(
        self,
        reply_queues: frozenset[str],
        drawn: Callable[[str, str], bool],
        markers: Path,
        *,
        hold_s: float = HOLD_S,
    ) -> None:
        self._reply_queues = reply_queues
        self._drawn = drawn
        self._markers = markers
        self._hold_s = hold_s
        markers.mkdir(parents=True, exist_ok=True)

    def after_send(self, queue: str, message_id: str) -> None:
        """Called after each send: for a drawn order's ``Received`` reply, ask for the kill and wait."""
        if queue not in self._reply_queues or not message_id.endswith(RECEIVED_SUFFIX):
            return
        if not self._drawn(queue, message_id) or not self._request(queue, message_id):
            return
        logger.warning("held for a kill between the create and the claim: %s on %s", message_id, queue)
        time.sleep(self._hold_s)
        logger.warning("not killed within %.0f s; the submission goes on", self._hold_s)

    def _request(self, queue: str, message_id: str) -> bool:
        """Write the kill request, once per reply: False when one was made before."""
        name = hashlib.sha256(f"{queue}/{message_id}".encode()).hexdigest()[:24]
        marker = self._markers / f"{name}.json"
        draft = self._markers / f".{name}.{os.getpid()}"
        draft.write_text(json.dumps({"pid": os.getpid(), "queue": queue, "messageId": message_id}))
        try:
            os.link(draft, marker)  # atomic, and refused when the marker exists: one kill per order
        except FileExistsError:
            return False
        finally:
            draft.unlink()
        return True


class ClaimKiller:
    """In the driver: SIGKILL and restart each process that asked for it (:class:`KillPoint`).

    Args:
        fleet: The devhost processes.
        markers: The folder of the kill requests.
        hold_s: A request older than this is dropped (its process went on).
    """

    def __init__(self, fleet: Fleet, markers: Path, *, hold_s: float = HOLD_S) -> None:
        self._fleet = fleet
        self._markers = markers
        self._hold_s = hold_s
        self._handled: set[str] = set()
        self._stop = threading.Event()
        self.kills: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._run, name="demo-claim-killer", daemon=True)
        markers.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            for marker in sorted(self._markers.glob("*.json")):
                if marker.name not in self._handled:
                    self.act_on(marker)

    def act_on(self, marker: Path) -> None:
        """Kill and restart the process that wrote ``marker``, unless it is gone, paused (tried again
        later) or the request is older than ``hold_s`` (dropped)."""
        request = json.loads(marker.read_text())
        if time.time() - marker.stat().st_mtime > self._hold_s:
            self._handled.add(marker.name)
            return
        name = next(
            (n for n, child in self._fleet.children.items() if child.process.pid == request["pid"]), None
        )
        if name is None:  # killed meanwhile by the random killer: its order waits all the same
            self._handled.add(marker.name)
            return
        try:
            killed = self._fleet.kill_and_restart(name)
        except RuntimeError:
            logger.warning("restarting %s failed; starting it again", name, exc_info=True)
            killed = True
            while not self._stop.wait(RESTART_RETRY_S) and not self._restarted(name):
                pass
        if killed:
            self._handled.add(marker.name)
            self.kills.append({"process": name, "at": time.time(), "reply": request["messageId"]})

    def _restarted(self, name: str) -> bool:
        try:
            return self._fleet.restart(name)
        except RuntimeError:
            logger.warning("restarting %s failed again", name, exc_info=True)
            return False
