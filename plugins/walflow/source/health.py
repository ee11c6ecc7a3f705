"""A replication slot's health: the WAL it holds back, how far it lags, and when walflow last confirmed a position.

Read by the stream task before each batch, by ``walflow status`` and by the pending-WAL sensor and trigger; the
judgement (:func:`assess_slot_health`) is pure so that all of them agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psycopg

from walflow.config.connector import ConnectorConfig
from walflow.errors import SlotError
from walflow.source.connection import CURRENT_WAL_LSN_SQL

#: The WAL a slot has not confirmed yet: bytes between its ``confirmed_flush_lsn`` and the server's current
#: position. Shared by :func:`pending_wal_bytes` and the asynchronous trigger, which runs it on its own connection.
PENDING_WAL_SQL = (
    f"SELECT pg_wal_lsn_diff({CURRENT_WAL_LSN_SQL}, confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE "
    "slot_name = %s"
)


def pending_wal_bytes(conn: psycopg.Connection, slot: str) -> int:
    """Bytes of WAL written since the slot's confirmed position: what the next stream batch has to read through.

    It counts all WAL of the server, not only changes to the publication's tables: measuring those would mean
    decoding the WAL (a peek of the slot), which costs as much as the batch itself and needs the slot free. It is
    an upper bound, good enough to decide whether a batch is worth starting.

    :raises SlotError: when the slot does not exist.
    """
    with conn.cursor() as cur:
        cur.execute(PENDING_WAL_SQL, (slot,))
        row = cur.fetchone()
    if row is None:
        raise SlotError(
            f"replication slot {slot!r} does not exist, so there is no pending WAL to wait for; run the connector's "
            "setup DAG first"
        )
    return int(row[0] or 0)


@dataclass
class SlotHealth:
    """How far a slot is behind, in bytes and in time (see :func:`slot_health`)."""

    slot: str
    exists: bool
    active_pid: int | None = None
    wal_status: str | None = None
    restart_lsn: str | None = None
    confirmed_flush_lsn: str | None = None
    current_wal_lsn: str | None = None
    #: WAL the server keeps for the slot (from restart_lsn): what fills the disk.
    retained_wal_bytes: int | None = None
    #: WAL written since the confirmed position: what the next batch reads through.
    confirmed_lag_bytes: int | None = None
    #: seconds since walflow last moved the slot's confirmed position (from the state table), ``None`` if unknown.
    seconds_since_confirmed: float | None = None
    #: when that was (epoch milliseconds), and the position it moved to.
    confirmed_at_ms: int | None = None
    confirmed_to: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def slot_health(
    conn: psycopg.Connection,
    slot: str,
    state: dict[str, Any] | None = None,
    now_ms: int | None = None,
) -> SlotHealth:
    """Retained WAL, confirmed lag and the time since the slot's confirmed position last moved.

    PostgreSQL records no time for a slot's confirmed position (``pg_stat_replication_slots`` counts decoded
    transactions and spills, with no timestamp of the last confirmation), so the time comes from walflow's own
    record: the stream task writes ``last_batch`` to the state table after every batch, with the position it
    advanced the slot to, when it finished, and (``confirmed_to``/``confirmed_at_ms``, carried over by batches
    that found nothing to confirm) when the confirmed position last moved.

    :param state: ``{"last_batch": ...}`` as read from the state table, or ``None``.
    :param now_ms: the current time in epoch milliseconds (tests pass it; default the clock).
    """
    with conn.cursor() as cur:
        cur.execute(
            f"""
            SELECT active_pid, wal_status, restart_lsn::text, confirmed_flush_lsn::text, {CURRENT_WAL_LSN_SQL}::text,
                   pg_wal_lsn_diff({CURRENT_WAL_LSN_SQL}, restart_lsn)::bigint,
                   pg_wal_lsn_diff({CURRENT_WAL_LSN_SQL}, confirmed_flush_lsn)::bigint
            FROM pg_replication_slots WHERE slot_name = %s
            """,
            (slot,),
        )
        row = cur.fetchone()
    if row is None:
        return SlotHealth(slot=slot, exists=False)
    active_pid, wal_status, restart_lsn, confirmed_flush_lsn, current_wal_lsn, retained, lag = row
    health = SlotHealth(
        slot,
        True,
        active_pid=active_pid,
        wal_status=wal_status,
        restart_lsn=restart_lsn,
        confirmed_flush_lsn=confirmed_flush_lsn,
        current_wal_lsn=current_wal_lsn,
        retained_wal_bytes=retained,
        confirmed_lag_bytes=lag,
    )
    at_ms, lsn = confirmed_time(state)
    if at_ms is not None:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        health.confirmed_at_ms, health.confirmed_to = at_ms, lsn
        health.seconds_since_confirmed = round(max(0, now_ms - at_ms) / 1000, 1)
    return health


def confirmed_time(state: dict[str, Any] | None) -> tuple[int | None, str | None]:
    """When walflow last moved the slot's confirmed position, and to where, from the state table's records."""
    if not state:
        return None, None
    last = state.get("last_batch")
    if isinstance(last, dict) and last.get("confirmed_at_ms"):
        return int(last["confirmed_at_ms"]), last.get("confirmed_to")
    if isinstance(last, dict) and last.get("advanced_to") and last.get("finished_at_ms"):
        return int(last["finished_at_ms"]), last["advanced_to"]
    return None, None


@dataclass
class HealthLimits:
    """Limits :func:`assess_slot_health` compares a slot with; ``None`` turns a limit off."""

    warn_retained_wal_bytes: int | None = None
    fail_retained_wal_bytes: int | None = None
    warn_lag_bytes: int | None = None
    warn_seconds_since_confirmed: float | None = None


def health_limits(config: ConnectorConfig) -> HealthLimits:
    """The connector's ``walflow.slot.*`` limits, as the stream task and ``walflow status`` apply them."""
    return HealthLimits(
        warn_retained_wal_bytes=config.walflow_slot_max_retained_wal_bytes,
        fail_retained_wal_bytes=config.walflow_slot_fail_retained_wal_bytes,
        warn_lag_bytes=config.walflow_slot_max_lag_bytes,
        warn_seconds_since_confirmed=config.walflow_slot_max_seconds_since_confirmed,
    )


def assess_slot_health(health: SlotHealth, limits: HealthLimits) -> tuple[list[str], str | None]:
    """Compare a slot's health with the limits: (warnings, the error that should fail the run or ``None``).

    Pure, so the stream task, ``walflow status`` and tests share one judgement.
    """
    if not health.exists:
        return [], (
            f"replication slot {health.slot!r} does not exist: changes made since it was lost may have been missed. "
            "Re-run the setup DAG with 'snapshot.mode: when_needed' to re-read the data."
        )
    warnings: list[str] = []
    advice = (
        "the server keeps this WAL until the slot confirms it, so the disk fills; run the stream DAG more often or "
        "with larger batches, and set heartbeat.action.query if the captured tables are idle while others are busy"
    )
    retained = health.retained_wal_bytes or 0
    if health.wal_status == "lost":
        return warnings, (
            f"slot {health.slot!r} has wal_status=lost: WAL it needed was removed (max_slot_wal_keep_size), so changes "
            "were missed and it cannot stream again. Drop it and take a new snapshot: `walflow reset <connector>`, "
            "then run the setup DAG"
        )
    if health.wal_status == "unreserved":
        warnings.append(
            f"slot {health.slot!r} has wal_status=unreserved: WAL it needs is about to be removed "
            "(max_slot_wal_keep_size); stream now, or expect to re-run setup with snapshot.mode when_needed"
        )
    if limits.fail_retained_wal_bytes is not None and retained > limits.fail_retained_wal_bytes:
        return warnings, (
            f"slot {health.slot!r} retains {retained} bytes of WAL, above the hard limit "
            f"walflow.slot.fail.retained.wal.bytes={limits.fail_retained_wal_bytes}: {advice}"
        )
    if limits.warn_retained_wal_bytes is not None and retained > limits.warn_retained_wal_bytes:
        warnings.append(
            f"slot {health.slot!r} retains {retained} bytes of WAL, above "
            f"walflow.slot.max.retained.wal.bytes={limits.warn_retained_wal_bytes}: {advice}"
        )
    lag = health.confirmed_lag_bytes or 0
    if limits.warn_lag_bytes is not None and lag > limits.warn_lag_bytes:
        warnings.append(
            f"slot {health.slot!r} is {lag} bytes behind the server, above "
            f"walflow.slot.max.lag.bytes={limits.warn_lag_bytes}: {advice}"
        )
    since = health.seconds_since_confirmed
    if (
        limits.warn_seconds_since_confirmed is not None
        and since is not None
        and since > limits.warn_seconds_since_confirmed
    ):
        warnings.append(
            f"slot {health.slot!r} last confirmed a position {since:.0f} s ago, above "
            f"walflow.slot.max.seconds.since.confirmed={limits.warn_seconds_since_confirmed:g}: is the stream DAG "
            "paused or failing?"
        )
    return warnings, None
