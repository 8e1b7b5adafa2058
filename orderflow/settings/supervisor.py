"""The sections of the loops that watch and drain: the supervisor (recovery, poison guard, retention),
the bounds of every scanning loop, the alerts, and the local queue consumers."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from orderflow.settings.base import Section


class Supervisor(Section):
    """Supervisor: the sweep's schedule and page sizes, recovery backoff and give-up, the poison guard,
    the reply relay's grace and the retention purge. Read by the supervisor role."""

    SUPERVISOR_SCHEDULE: str = Field(
        "*/30 * * * * *",
        description="NCRONTAB schedule of the supervisor's timer trigger on Azure (every 30 s). Timer "
        "triggers are singletons per app, so one sweep runs at a time.",
    )
    SUPERVISOR_PAGE_SIZE: int = Field(100, ge=1, description="max_item_count of each sweep query page.")
    SUPERVISOR_MAX_RECORDS: int = Field(500, ge=1, description="Most records one sweep examines.")
    SUPERVISOR_MAX_FAILURES: int = Field(
        6,
        ge=1,
        description="failureCount at which the supervisor gives up an order's forward progress: it is "
        "compensated (Compensating + alert).",
    )
    SUPERVISOR_BACKOFF_INITIAL_S: float = Field(
        1.0, ge=0, description="nextAttemptAt delay after the first recovery; doubles per failure."
    )
    SUPERVISOR_BACKOFF_MAX_S: float = Field(30.0, ge=0, description="Largest nextAttemptAt delay.")
    SUPERVISOR_EXTENDED_BACKOFF_AFTER: int = Field(
        4,
        ge=1,
        description="failureCount from which a re-queued order waits SUPERVISOR_EXTENDED_BACKOFF_S instead "
        "of the exponential backoff (default 4). The first recoveries are usually a crashed worker or a "
        "blip and are retried within seconds; an order that timed out this often is waiting on an outage "
        "that seconds will not fix. With SUPERVISOR_MAX_FAILURES=6, failures 4 and 5 wait the extended "
        "period and the 6th gives up. A value >= SUPERVISOR_MAX_FAILURES disables the extended backoff.",
    )
    SUPERVISOR_EXTENDED_BACKOFF_S: float = Field(
        60.0,
        ge=0,
        description="Seconds an order waits before its next claim once failureCount reached "
        "SUPERVISOR_EXTENDED_BACKOFF_AFTER (default 60): twice SUPERVISOR_BACKOFF_MAX_S, long enough for "
        "a restarted dependency or a throttled store to recover, short enough that an order still gives "
        "up (compensated, with an alert) within minutes rather than hours.",
    )
    REPLY_GRACE_S: float = Field(
        30.0,
        ge=0,
        description="Seconds a final reply may stay owed (pendingReply) before the supervisor re-sends it: "
        "long enough for the writer to send and clear it itself, so the relay re-sends only after a failure.",
    )
    POISON_FAILURES: int = Field(
        3,
        ge=0,
        description="Consecutive attempts of an order that fail the same way (the same step and the same "
        "error code, as the attempt recorded it; expiries and the agents' transient codes never count, "
        "a workflow_error of the orchestration's own code does) after which the supervisor holds the "
        "order for an "
        "operator instead of re-queueing it: Pending and suspended (suspendedBy "
        "supervisor:poison-guard), lastError repeated_failure and a poison_order alert. Not while "
        "workflow_version_failing is raised for that failure (it is then systemic: a dependency down or "
        "a broken version). 0 disables the guard.",
    )
    POISON_VERSION_ORDERS: int = Field(
        5,
        ge=1,
        description="Orders of one workflow version whose attempts failed at the same step with the same "
        "error code within POISON_VERSION_WINDOW_S, as one supervisor saw them, at which it raises "
        "workflow_version_failing (once per window).",
    )
    POISON_VERSION_WINDOW_S: float = Field(
        600.0,
        gt=0,
        description="Window of POISON_VERSION_ORDERS, seconds (default 10 minutes). A local supervisor "
        "keeps it across sweeps, in memory; an Azure timer sweep keeps it for one sweep only.",
    )
    COMPENSATION_LOG_RETENTION_S: float = Field(
        2_592_000.0,
        ge=0,
        description="Seconds a finished order (Processed, Compensated, Cancelled) keeps its payment and "
        "customer data after its last change before the supervisor purges it: the effect ids and amounts "
        "of its compensation log and step results, its error and reply texts, and its order document's "
        "customer id, name, amount and items. Statuses, keys, the content hash and times stay "
        "(docs/data.md). Default 30 days; 0 never purges. CompensationFailed and Error orders keep "
        "theirs until an operator resolves them; the period starts then.",
    )
    DEAD_LETTER_RETENTION_S: float = Field(
        1_209_600.0,
        ge=0,
        description="Seconds a dead letter is kept after it was dead-lettered before the supervisor's "
        "retention pass deletes it: a dead letter holds the whole message, customer and payment data "
        "included, and neither queue service expires one (docs/data.md). Default 14 days; at most "
        "COMPENSATION_LOG_RETENTION_S, and not 0 unless that is 0 too (0 never deletes).",
    )

    @model_validator(mode="after")
    def _dead_letters_go_no_later_than_the_data(self) -> Self:
        # A dead letter holds the order's whole body: keeping it longer would outlive the purge.
        data, dead = self.COMPENSATION_LOG_RETENTION_S, self.DEAD_LETTER_RETENTION_S
        if data > 0 and (dead == 0 or dead > data):
            raise ValueError(
                f"DEAD_LETTER_RETENTION_S ({dead:g}) must be more than 0 and at most "
                f"COMPENSATION_LOG_RETENTION_S ({data:g}): a dead letter holds the customer and payment "
                "data the retention purge removes from the stores"
            )
        return self


class Scans(Section):
    """Scans: the bounds of one pass of any scanning loop (the supervisor's sweep, the starter, the reply
    relay, retention). Read by orderflow.stores.paging through those roles."""

    SCAN_MAX_PAGES: int = Field(
        50,
        ge=1,
        description="Most query pages one pass of a scanning loop reads (the supervisor's sweep, the "
        "starter, the reply relay, retention), beside its record bound: a store that keeps answering "
        "pages with nothing on them cannot hold the loop. A pass cut short here is over: the next one "
        "starts from the first page (a sweep, with a new cutoff).",
    )
    SCAN_MAX_EMPTY_PAGES: int = Field(
        10,
        ge=1,
        description="Empty pages in a row, each with a new continuation token, after which a pass stops "
        "and reports an anomaly (a warning and the orderflow.scan_anomalies metric; for the supervisor's "
        "sweep also the scan_anomaly alert); the next pass starts from the first page. Cosmos DB may "
        "return a few such pages in a cross-partition query, up to one per partition range: keep it above "
        "the state container's physical partition count.",
    )
    SCAN_MAX_S: float = Field(
        10.0,
        gt=0,
        description="Most seconds one pass of a scanning loop runs before it stops at the next page "
        "boundary (the next pass starts from the first page): the supervisor's sweep runs on the thread "
        "that renews its lease and re-sends owed replies, which must not wait behind it.",
    )


class Alerts(Section):
    """Alerts: how alerts a client can raise at will are counted, and how far a host's clock may drift
    before it alerts. Read by every role that raises an alert and by the clock-skew check."""

    ALERT_WINDOW_S: int = Field(
        3600,
        ge=1,
        le=86_400,
        description="Seconds of one alert-counting window (default 3600, one hour; at most a day). The "
        "alerts of a kind a client can raise at will (conflicting_order, max_delivery_count) are counted "
        "into one stored alert per kind, client (the queue the message arrived on) and window, with a "
        "count and its first and last times, instead of one stored alert each. Windows start at UTC "
        "midnight; a longer window keeps fewer alerts, a shorter one dates the counts more closely.",
    )
    CLOCK_SKEW_TOLERANCE_S: float = Field(
        2.0,
        ge=0,
        description="How far a host's clock may be from the state store's before the host alerts "
        "clock_skew: when it is certainly more than half of this away (default 2 s; NTP keeps hosts within "
        "milliseconds). No deadline depends on it: every host writes and compares deadlines on the state "
        "store's time, measured on its own writes; the host's own clock still times its durable timers.",
    )


class Consumers(Section):
    """Consumers: how long a local queue consumer locks its messages, and when one that keeps failing is
    dead-lettered (on Azure the Functions host and host.json do this). Read by the hosts' consumer loops;
    how the local loops poll and renew is the local host's (:mod:`devhost.settings`)."""

    QUEUE_LOCK_S: float = Field(
        30.0,
        gt=0,
        description="Lock (visibility timeout) a local consumer takes on a received message, renewed while "
        "its handler runs (QUEUE_MAX_LOCK_RENEWAL_S). On Azure the queue's own LockDuration applies.",
    )
    MAX_DELIVERY_COUNT: int = Field(
        10,
        ge=1,
        description="Deliveries after which a message that keeps failing is dead-lettered "
        "(Service Bus maxDeliveryCount).",
    )
