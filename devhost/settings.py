"""The local host's own settings: what only a devhost process reads (its durabletask worker, its
supervisor lease, its cross-process wake-ups, its loops' cadences, concurrency and polling). The Functions
app never sees them: they are not part of :class:`orderflow.settings.Settings`, and a devhost process loads
them beside it, from the same environment (:func:`load_settings`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError

from orderflow.settings import Settings
from orderflow.settings.base import Section


class LocalSettings(Section):
    """Local host: the devhost's worker threads and backend, its supervisor lease blob, its wake-up
    directory, its starter and supervisor cadences, how many orchestrations and agent requests one process
    runs at once, and how its queue consumers poll and renew their locks. Read by devhost/ only; unused on
    Azure."""

    WORKER_THREADS: int = Field(
        32,
        ge=1,
        description="Thread pool of the local durabletask worker, shared by orchestrator episodes and "
        "activities. Activities wait on the stores and queues, so more threads than cores pay off.",
    )
    DURABLETASK_BACKEND: Literal["process", "in-process"] = Field(
        "process",
        description="Local host only: where a devhost process runs its durabletask in-memory backend. "
        "'process' (default): a child process of its own, which ends with the devhost (even a killed "
        "one), so the backend's gRPC server does not share the devhost's interpreter lock; "
        "'in-process': threads of the devhost itself. Either way each devhost process has its own "
        "backend. Unused on Azure: the Durable Functions extension runs outside the Python worker.",
    )
    SUPERVISOR_LEASE_ENABLED: bool = Field(
        True,
        description="Local hosts elect one sweeping supervisor through a blob lease (default true). Off, "
        "every supervisor sweeps: still correct, since each recovery is a conditional write, only more "
        "work. Azure ignores it: the supervisor's timer trigger is already a singleton.",
    )
    SUPERVISOR_LEASE_S: int = Field(
        15,
        ge=15,
        le=60,
        description="Period of the supervisor lease, seconds (Storage allows 15-60; default 15, the "
        "shortest). A stand-by takes over at most one period after a dead leader's last renewal, plus its "
        "own SUPERVISOR_INTERVAL_S polling; the leader renews every third of a period and stops acting as "
        "leader a fifth of a period before its lease could expire, so a shorter period is faster take-over "
        "at no cost in safety.",
    )
    SUPERVISOR_LEASE_BLOB: str = Field(
        "orderflow-leases/supervisor",
        pattern=r"^[a-z0-9](?:-?[a-z0-9]){2,62}/.+$",
        description="The lease blob as 'container/blob' in the STORAGE_CONNECTION_STRING account, created "
        "on first use. Every supervisor of one deployment must name the same blob; deployments sharing a "
        "storage account must name different ones.",
    )
    WAKEUP_DIR: str = Field(
        "",
        description="Local host only: a directory the devhost processes of one machine share, where each "
        "binds a Unix datagram socket; a process that sends to a queue tells the others, and their idle "
        "loop of that queue receives at once instead of at its next poll (the queue stays the source of "
        "truth; a lost wake-up costs one poll); a submission's new record wakes the other processes' "
        "starters the same way. Each socket's address is random, named in a file only its user may read, "
        "and a datagram from another user is dropped. Empty (default): no wake-ups across processes. The "
        "demo, chaos and bench fleets set it to their run directory. Unused on Azure: Service Bus triggers "
        "receive each message as it arrives.",
    )
    WAKEUP_INBOUND: bool = Field(
        False,
        description="Local host only: every client announces each send to its inbound queue in WAKEUP_DIR "
        "as the devhost processes announce theirs (the benchmark's load generator does), so the "
        "submission's loop, after a receive, waits for the next announcement (polling every "
        "POLL_MAX_INTERVAL_S for a lost one) instead of receiving again POLL_INTERVAL_S later. Off "
        "(default): a client announces nothing, and the loop polls again soon after each order. Unused on "
        "Azure.",
    )
    STARTER_INTERVAL_S: float = Field(
        2.0,
        gt=0,
        description="Seconds between a devhost's starter sweeps for Pending records the submission did not "
        "start (a submission or a cancel also wakes them at once; Azure: STARTER_SCHEDULE).",
    )
    MAX_IN_FLIGHT_PER_HOST: int = Field(
        64,
        ge=1,
        description="Most orchestrations one devhost process runs at once; neither the submission nor the "
        "starter claims more. "
        "A step's deadline is a latency budget: claiming more than the host can move within it turns "
        "load into timeouts and recoveries, so the backlog waits as Pending instead.",
    )
    SUPERVISOR_INTERVAL_S: float = Field(
        2.0,
        gt=0,
        description="Seconds between a devhost's supervisor sweeps (Azure: SUPERVISOR_SCHEDULE). Recovery "
        "latency is at most this plus the step timeout.",
    )
    AGENT_CONCURRENCY: int = Field(
        16,
        ge=1,
        description="Requests one devhost agent loop handles at once (Azure: host.json's Service Bus "
        "maxConcurrentCalls).",
    )
    POLL_INTERVAL_S: float = Field(0.2, gt=0, description="Sleep of a consumer loop after an empty receive.")
    POLL_MAX_INTERVAL_S: float = Field(
        0.8,
        gt=0,
        description="Longest sleep of a consumer loop whose queue stays empty (the sleep doubles from "
        "POLL_INTERVAL_S). Idle polling is most of a local emulator's load; keep it well below a step's "
        "deadline, since an idle response queue answers its first message this late.",
    )
    QUEUE_MAX_LOCK_RENEWAL_S: float = Field(
        120.0,
        ge=0,
        description="Longest time a local consumer keeps renewing a message's lock while its handler runs "
        "(renewed each time half of QUEUE_LOCK_S is left): host.json's maxAutoLockRenewalDuration, with "
        "which the Functions host does the same for Service Bus on Azure (2 minutes). A handler still "
        "running then has its message abandoned for redelivery, with a warning, and what it settles later is "
        "discarded. 0 disables renewal: a message then stays locked QUEUE_LOCK_S only.",
    )

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> LocalSettings:
        """Build the local host's settings as :meth:`orderflow.settings.Settings.load` builds the others:
        keyword overrides, then environment variables named like the fields (default: ``os.environ``),
        then the defaults.

        Raises:
            pydantic.ValidationError: a value has the wrong type or breaks a bound, or a keyword names no
                local setting.
        """
        source = os.environ if env is None else env
        values: dict[str, Any] = {name: source[name] for name in cls.model_fields if name in source}
        values.update(overrides)
        return cls.model_validate(values)


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> tuple[Settings, LocalSettings]:
    """orderflow's settings and the local host's, from one environment (default: ``os.environ``) and
    keyword overrides of either (a setting's name and its value).

    Raises:
        pydantic.ValidationError: as :meth:`Settings.load` and :meth:`LocalSettings.load`; when both
            refuse, one error lists every invalid setting, orderflow's first.
    """
    mine = [name for name in overrides if name in LocalSettings.model_fields]
    local_overrides = {name: overrides.pop(name) for name in mine}
    settings: Settings | None = None
    local: LocalSettings | None = None
    refusals: list[ValidationError] = []
    try:
        settings = Settings.load(env, **overrides)
    except ValidationError as exc:
        refusals.append(exc)
    try:
        local = LocalSettings.load(env, **local_overrides)
    except ValidationError as exc:
        refusals.append(exc)
    if len(refusals) == 1:
        raise refusals[0]
    if refusals:
        raise ValidationError.from_exception_data(
            "Settings",
            [
                {"type": e["type"], "loc": e["loc"], "input": e["input"], "ctx": e.get("ctx", {})}
                for refusal in refusals
                for e in refusal.errors()
            ],
            hide_input=True,
        )
    assert settings is not None and local is not None
    return settings, local
