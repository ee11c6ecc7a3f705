"""What one stream batch did: its summary (the task's XCom and metrics) and its record in the state table, which
`walflow status` shows and the next batch starts from (where ``source.sequence`` goes on, and where the slot was
left, to tell a slot a server crash rolled back)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from walflow.source.state import StateStore

#: the state table's key of a connector's last batch
LAST_BATCH_KEY = "last_batch"
#: the prefix of the batch history's keys: ``batch_history/<n>``, ``n`` the batch's number modulo the history's size
#: (``walflow.status.history.batches``), so the history is a ring of at most that many rows
HISTORY_PREFIX = "batch_history/"


#: how many ids of bookkeeping transactions a summary lists (it counts them all)
BOOKKEEPING_IDS = 200


@dataclass
class BatchSummary:
    """What one batch did; small enough for an XCom."""

    connector: str
    slot: str
    start_lsn: str | None = None
    upto_lsn: str | None = None
    first_lsn: str | None = None
    last_lsn: str | None = None
    advanced_to: str | None = None
    transactions: int = 0
    events: int = 0
    records: int = 0
    bytes: int = 0
    filtered: int = 0
    events_per_topic: dict[str, int] = field(default_factory=dict)
    stopped_by: str = "end"
    seconds: float = 0.0
    heartbeat_sent: bool = False
    snapshot_rows: int = 0
    #: buffered incremental-snapshot rows dropped because a change inside their watermark window made them stale
    snapshot_rows_dropped: int = 0
    signals: int = 0
    retained_wal_bytes: int | None = None
    lag_bytes: int | None = None
    last_event_commit_ms: int | None = None
    #: the reference's LastEvent: op, table and LSN of the batch's last change event
    last_event: dict[str, Any] | None = None
    ops: dict[str, int] = field(default_factory=dict)
    #: events the batch could not build and left out (event.processing.failure.handling.mode warn or skip)
    events_left_out: int = 0
    #: what the batch repaired or found worth a look (a table put back into the publication, ...)
    warnings: list[str] = field(default_factory=list)
    #: schema facts written (tables whose definition changed: walflow.capture.schema_facts)
    schema_facts: list[str] = field(default_factory=list)
    #: tables walflow re-read itself (an incremental snapshot) and why
    rereads: list[dict[str, str]] = field(default_factory=list)
    #: transactions that only wrote walflow's state table (this connector's batches or another's on the database):
    #: no BEGIN/END records for them; their ids, the first :data:`BOOKKEEPING_IDS` of them
    bookkeeping_transactions: int = 0
    bookkeeping_xids: list[int] = field(default_factory=list)
    #: the server's timeline (a promoted standby starts a new one), recorded so that the next batch knows a failover
    timeline: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def previous_batch_record(store: StateStore) -> dict[str, Any]:
    """The last batch's record, or an empty one for a connector that never streamed."""
    return (store.get(LAST_BATCH_KEY) or {}) if store.exists() else {}


def record_batch(
    store: StateStore,
    summary: BatchSummary,
    previous: dict[str, Any],
    seconds: float,
    last_commit_lsn: int | None,
    last_commit_us: int | None,
    history_size: int = 1000,
) -> None:
    """Write what ``summary``'s batch did over ``previous`` (the record it started from) and its line of the batch
    history, in one statement: with an all-tables publication every write to the state table is decoded by the next
    batch too, so a batch adds one transaction, whatever it records."""
    if not store.exists():
        return
    finished_ms = int(time.time() * 1000)
    moved = summary.advanced_to is not None and summary.advanced_to != summary.start_lsn
    number = int(previous.get("number") or 0) + 1
    line = {
        "number": number,
        "finished_at_ms": finished_ms,
        "seconds": seconds,
        "events": summary.events,
        "records": summary.records,
        "bytes": summary.bytes,
        "snapshot_rows": summary.snapshot_rows,
        "events_left_out": summary.events_left_out,
        "stopped_by": summary.stopped_by,
        "lag_bytes": summary.lag_bytes,
        "retained_wal_bytes": summary.retained_wal_bytes,
        "advanced_to": summary.advanced_to,
        # how far the batch's last change was behind the source when it was sent (Debezium's MilliSecondsBehindSource)
        "ms_behind_source": (
            max(0, finished_ms - summary.last_event_commit_ms) if summary.last_event_commit_ms is not None else None
        ),
    }
    store.put_many(
        {
            f"{HISTORY_PREFIX}{number % history_size}": line,
            LAST_BATCH_KEY: {
                "number": number,
                "finished_at_ms": finished_ms,
                "events": summary.events,
                "transactions": summary.transactions,
                "seconds": seconds,
                "advanced_to": summary.advanced_to,
                "stopped_by": summary.stopped_by,
                # when the confirmed position last moved, for walflow.slot.max.seconds.since.confirmed
                "confirmed_to": summary.advanced_to if moved else previous.get("confirmed_to"),
                "confirmed_at_ms": finished_ms if moved else previous.get("confirmed_at_ms"),
                # where the next batch's source.sequence starts (see StreamBatch.run)
                "last_commit_lsn": last_commit_lsn,
                "last_commit_us": last_commit_us,
                "timeline": summary.timeline,
                # events left out since the connector started streaming (event.processing.failure.handling.mode)
                "events_left_out": int(previous.get("events_left_out") or 0) + summary.events_left_out,
                # what the batch warned of (the task log has them all), for walflow status and the UI page
                "warnings": [w[:500] for w in summary.warnings[:20]],
            },
        }
    )
    if number % history_size == 0:
        # once a turn of the ring: lines left beyond a history made smaller since (a second, rare transaction)
        store.delete_prefixed(HISTORY_PREFIX, keep={f"{HISTORY_PREFIX}{n}" for n in range(history_size)})


def batch_history(store: StateStore, since_ms: int | None = None) -> list[dict[str, Any]]:
    """The batches the history still holds (finished after ``since_ms``, if given), oldest first."""
    lines = [v for v in store.prefixed(HISTORY_PREFIX).values() if isinstance(v, dict)]
    if since_ms is not None:
        lines = [v for v in lines if int(v.get("finished_at_ms") or 0) >= since_ms]
    return sorted(lines, key=lambda v: int(v.get("number") or 0))
